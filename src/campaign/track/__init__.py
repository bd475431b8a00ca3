"""Runs traced to decisions: manifests (hypothesis, baseline, change, data, code, parameters, environment, seeds,
status, metrics, artifacts, decision) stored as files with an SQLite index (campaign run, campaign runs)."""
