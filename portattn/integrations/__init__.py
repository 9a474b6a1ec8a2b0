"""Integrations with code that does not call portattn directly: the ``torch.nn.functional`` SDPA patch."""
