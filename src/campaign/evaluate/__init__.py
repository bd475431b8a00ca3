"""Can I trust the score? Error analysis, regressions between two models, seed variance.

- `analyze_errors(path, task=...)`: classification (confusion, per-class, slices) or extraction (validity, fields).
- `regress(baseline, candidate, guards=...)`: flips, per-class deltas, McNemar, guards on what must not drop.
- `compare_seeds(results, min_effect=...)`: paired statistics over seeds and a verdict against a useful effect.
numpy, scipy and scikit-learn (the `data` extra) and matplotlib (`report`) are imported only when used.
"""
from .analysis import ClassificationReport, ErrorsReport, analyze_classification, analyze_errors
from .bootstrap import BootstrapInterval, ExampleBootstrap, bootstrap_mean, paired_bootstrap
from .extraction import ExtractionReport, analyze_extraction
from .json_schema import schema_errors
from .predictions import Prediction, PredictionSet, read_predictions, read_rows
from .regress import Guard, RegressionReport, parse_guard, regress
from .seeds import SeedsReport, compare_paired, compare_seeds
from .stats import mcnemar, paired_t, power_paired_t, seeds_for_power, sign_test, wilcoxon
from .values import normalize_value, same_normalized

__all__ = ["BootstrapInterval", "ClassificationReport", "ErrorsReport", "ExampleBootstrap", "ExtractionReport",
           "Guard", "Prediction", "PredictionSet", "RegressionReport", "SeedsReport", "analyze_classification",
           "analyze_errors", "analyze_extraction", "bootstrap_mean", "compare_paired", "compare_seeds", "mcnemar",
           "normalize_value", "paired_bootstrap", "paired_t", "parse_guard", "power_paired_t", "read_predictions",
           "read_rows", "regress", "same_normalized", "schema_errors", "seeds_for_power", "sign_test", "wilcoxon"]
