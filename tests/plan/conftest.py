"""Plan and price files written by the tests (YAML), with figures small enough to schedule by hand."""
from __future__ import annotations

import json

import pytest


@pytest.fixture
def write_yaml(tmp_path):
    """Write a dict as <tmp>/<name> (JSON is valid YAML, so the reader's YAML path reads it) and return the path."""

    def write(data, name: str = "plan.yaml"):
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
        return path

    return write


PRICES = {
    "source": "test prices", "date": "2026-01-01", "example": False, "currency": "USD",
    "cards": [{"card": "H100-SXM-80GB", "hourly": "2.50",
               "packages": [{"name": "3-day", "days": 3, "cards": 1, "price": "100.00"},
                            {"name": "7-day", "days": 7, "cards": 1, "price": "200.00"},
                            {"name": "3-day-4x", "days": 3, "cards": 4, "price": "500.00"},
                            {"name": "30-day-4x", "days": 30, "cards": 4, "price": "1000.00"}]}],
}


@pytest.fixture
def prices(write_yaml):
    return write_yaml(PRICES, "prices.yaml")
