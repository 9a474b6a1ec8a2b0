"""portattn-hipify: the build step that turns the CUDA kernel sources (src_cuda/) into HIP (src_hip/).

The mapping is a table of rules (``hipify.rules.RULES``); constructs without a safe HIP form stop the run
with ``file:line:col`` diagnostics. Run ``portattn-hipify src_cuda -o src_hip`` (or ``python -m hipify``).
"""
from .cli import main
from .rules import RULES, Rule
from .translate import CHECKS, Diagnostic, Translation, TranslationError, translate, translate_body, translate_file

__all__ = [
    "CHECKS", "RULES", "Diagnostic", "Rule", "Translation", "TranslationError", "main", "translate", "translate_body",
    "translate_file",
]
