"""Metric records logged per second by the run store: one writer (campaign.run(...).log, batched), and 8 writer
processes at once, beside MLflow's file store logging the same records (MlflowClient.log_batch, 1,000 per batch,
its own batching limit) when mlflow is installed (`pip install mlflow-skinny`).

    python benchmarks/store_speed.py [--records 100000] [--writers 8]

Every record is read back afterwards and counted: a figure counts only what was stored.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def campaign_writer(root: str, n: int) -> str:
    from campaign.track.run import run

    with run("bench", root=root) as r:
        for i in range(n):
            r.log(step=i, loss=1.0 / (i + 1))
    return r.id


def mlflow_writer(uri: str, n: int) -> str:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    run = client.create_run(client.get_experiment_by_name("bench").experiment_id)   # made once, before the writers
    stamp = int(time.time() * 1000)
    batch = []
    for i in range(n):
        batch.append(Metric("loss", 1.0 / (i + 1), stamp, i))
        if len(batch) == 1000:
            client.log_batch(run.info.run_id, metrics=batch)
            batch = []
    if batch:
        client.log_batch(run.info.run_id, metrics=batch)
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def _campaign_count(root: str, ids: list[str]) -> int:
    from campaign.track.store import Store

    return sum(len(Store(root).metrics(i)) for i in ids)


def _mlflow_count(uri: str, ids: list[str]) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    return sum(len(client.get_metric_history(i, "loss")) for i in ids)


def measure(writer, counter, target: str, records: int, writers: int) -> tuple[float, int]:
    start = time.perf_counter()
    if writers == 1:
        ids = [writer(target, records)]
    else:
        with multiprocessing.get_context("spawn").Pool(writers) as pool:
            ids = pool.starmap(writer, [(target, records // writers)] * writers)
    seconds = time.perf_counter() - start
    return seconds, counter(target, ids)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--writers", type=int, default=8)
    args = p.parse_args()
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")   # MLflow 3 keeps its file store in maintenance mode
    try:
        import mlflow  # noqa: F401
        have_mlflow = True
    except ImportError:
        have_mlflow = False
    print(f"{args.records:,} records (step, loss); {os.cpu_count()} CPUs")
    for writers in (1, args.writers):
        with tempfile.TemporaryDirectory() as tmp:
            seconds, stored = measure(campaign_writer, _campaign_count, str(Path(tmp) / ".campaign"), args.records,
                                      writers)
            print(f"campaign, {writers} writer(s): {stored:,} stored in {seconds:.2f} s = {stored / seconds:,.0f}/s")
        if have_mlflow:
            with tempfile.TemporaryDirectory() as tmp:
                from mlflow.tracking import MlflowClient

                MlflowClient(tracking_uri=f"file:{tmp}/mlruns").create_experiment("bench")
                seconds, stored = measure(mlflow_writer, _mlflow_count, f"file:{tmp}/mlruns", args.records, writers)
                print(f"mlflow file store, {writers} writer(s): {stored:,} stored in {seconds:.2f} s = "
                      f"{stored / seconds:,.0f}/s")
    if not have_mlflow:
        print("mlflow not installed: its side skipped (pip install mlflow-skinny)")


if __name__ == "__main__":
    main()
