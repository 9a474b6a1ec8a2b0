"""Integrations with code that does not call portattn directly: the ``torch.nn.functional`` SDPA patch
(``sdpa``), flash-attn 2.x's functions (``flash_attn``) and transformers' ``attn_implementation="portattn"``
(``transformers``, imported on demand)."""
