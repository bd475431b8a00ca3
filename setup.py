"""The one compiled part: the caching-allocator model (src/campaign/memory/_allocator.c), optional. Where it cannot
be built the install goes on, says so in one line, and memory/allocator.py's Python model stands in (the same
results, slower; `campaign memory --json` names the model that ran in "allocator_model"). Everything else is in
pyproject.toml."""
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildOptional(build_ext):
    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # setuptools' optional=True goes on; this says why, in one line
            reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            print(f"campaign: the compiled allocator model was not built ({reason}); the Python model runs instead "
                  "(same results, slower)", file=sys.stderr)
            raise


setup(ext_modules=[Extension("campaign.memory._allocator", ["src/campaign/memory/_allocator.c"], optional=True)],
      cmdclass={"build_ext": BuildOptional})
