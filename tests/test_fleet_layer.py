"""The fleet layer (sqsjkr/fleet/) under both faces: it loads neither face nor the libraries only a
face needs, so that a program can use it without them.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: What no module of the layer may load: the faces and their libraries.
FACES = ("sqsjkr.commands", "sqsjkr.web", "click", "flask", "jinja2", "werkzeug")

LOAD_EVERY_MODULE = """
import importlib, json, pkgutil, sys
import sqsjkr.fleet
for module in pkgutil.iter_modules(sqsjkr.fleet.__path__):
    importlib.import_module(f"sqsjkr.fleet.{module.name}")
print(json.dumps(sorted(sys.modules)))
"""


def test_the_fleet_layer_loads_no_face() -> None:
    result = subprocess.run(
        [sys.executable, "-c", LOAD_EVERY_MODULE], capture_output=True, text=True, check=True
    )
    loaded = json.loads(result.stdout)
    assert "sqsjkr.fleet.status" in loaded  # the modules were found and imported
    assert [name for name in loaded if name.split(".")[0] in FACES or name.startswith(FACES)] == []
