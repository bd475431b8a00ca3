"""Leak-free evaluation data: read, normalize, deduplicate (exact and near), split, check leaks. (The test-set
usage ledger is in campaign.track.usage, with the run records.)

split_file and check_files are one pipeline each over an engine (engine.py): "local" (this process, local.py) or
"ray" (Ray Data, for data held as shards: the ray/ package).

numpy, pyarrow and scikit-learn (the `data` extra) are imported inside the functions that need them, so importing
this package stays light.
"""
from .dedup import DedupResult, NearPair, find_duplicates
from .engine import ENGINES, engine_for
from .kfold import LeakFreeKFold
from .leaks import CHECK_IDS, LeakCheck, LeakReport, check_files, find_leaks
from .normalize import NORMALIZER_VERSION, content_hash, normalize_text
from .read import Dataset, Fields, make_dataset, read_dataset
from .sketch import DedupConfig, choose_banding, sketch
from .split import LeakFreeSplitter, SplitResult, load_manifest, parse_ratios, split_file

__all__ = ["CHECK_IDS", "ENGINES", "Dataset", "DedupConfig", "DedupResult", "Fields", "LeakCheck", "LeakFreeKFold",
           "LeakFreeSplitter", "LeakReport", "NORMALIZER_VERSION", "NearPair", "SplitResult",
           "check_files", "choose_banding", "content_hash", "engine_for", "find_duplicates", "find_leaks",
           "load_manifest", "make_dataset", "normalize_text", "parse_ratios", "read_dataset", "sketch", "split_file"]
