"""Tools around the library: the command line, demo, benchmark and plot, the resource report, the float64
reference, the MFMA layout tables of the host, and the verification hooks (``portattn.testing``)."""
