"""Fine-tune or compress: which variant? (question 4). `compare_quant(setup, formats=...)` runs the reference and
each weight format on the same evaluation data: memory estimated and measured, quality tested against the reference.

This is its own package rather than a module of `memory/` because it runs models and evaluates them: it uses
`memory` (formats, estimate, the measuring protocol), `evaluate` (regress, paired statistics) and the user's
setup file, and dependencies point downward (docs/design.md; memory imports neither evaluate nor train).
torch and torchao are imported only inside the functions that need them.
"""
from .quant import compare_quant
from .result import QuantReport, QuantVariant
from .setup import QuantSetup, load_quant_setup

__all__ = ["QuantReport", "QuantSetup", "QuantVariant", "compare_quant", "load_quant_setup"]
