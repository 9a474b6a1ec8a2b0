"""Runtime: from a kernel variant to a launched kernel, for either vendor.

``target`` (what a GPU or a named arch is), ``sources`` (the kernel source trees), ``compiler`` with ``nvrtc`` /
``hiprtc`` (+ ``hiprtc_worker``) and ``cache`` (compile, memory and disk cache), ``backend`` (one object per
vendor: compiler and driver), ``cuda_driver`` / ``hip_driver`` (load and launch), ``loader`` (loaded functions per
device and variant), ``params`` (parameter structs generated from the headers), ``resources`` and
``amdgpu_metadata`` (what a binary uses), ``rocm_libs`` (finding ROCm's libraries), ``toolchains`` (the ROCm
hiprtc installations a compile can use: this machine's and those in the setup script's chroots). Nothing here
knows a kernel family.
"""
