"""Torch operators: attention as ``torch.ops.portattn.*`` (custom operators with fake implementations), the public
functions that call them, and the rule for which calls portattn takes (``support.py``)."""
