"""Torch operators: attention as ``torch.ops.portattn.*`` (custom operators with fake implementations), the public
functions that call them (``attention.py``: attention and its backward; ``kvcache.py``: decoding over a KV cache),
and the rule for which calls portattn takes (``support.py``)."""
