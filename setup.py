"""The one compiled part: the caching-allocator model (src/campaign/memory/_allocator.c), optional. Where no C
compiler is found the install goes on and memory/allocator.py's Python model stands in (the same results, slower).
Everything else is in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("campaign.memory._allocator", ["src/campaign/memory/_allocator.c"], optional=True)])
