"""portattn-hipify: translate CUDA kernel sources to HIP for 64-lane AMD waves, or refuse with the reason.

Names map through a table of rules (``hipify.rules.RULES``); cross-lane code is judged by what it means on a
64-lane wave (``hipify.wave64``): translated as it is, rewritten to an equivalent form, or refused with
``file:line:col`` diagnostics that carry a check id and a hint. Run ``portattn-hipify SRC -o OUT`` (or
``python -m hipify``) on a folder or a file; portattn builds its own ``src_hip/`` from ``src_cuda/`` this way.
"""
from .cli import main
from .rules import RULES, Rule
from .translate import CHECKS, Diagnostic, Translation, TranslationError, translate, translate_body, translate_file

__all__ = [
    "CHECKS", "RULES", "Diagnostic", "Rule", "Translation", "TranslationError", "main", "translate", "translate_body",
    "translate_file",
]
