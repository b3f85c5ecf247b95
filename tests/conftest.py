import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).parent))

import os

from hypothesis import settings

# CI runs the property tests on a fixed, reproducible set of examples; locally they explore.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
