"""isinstance_if_loaded: a type check against an optional package's class that never imports it."""

from __future__ import annotations

import subprocess
import sys
from collections import OrderedDict

from scar_core._lazy import isinstance_if_loaded


def test_an_instance_of_a_loaded_class_is_recognised() -> None:
    assert isinstance_if_loaded(OrderedDict(), "collections", "OrderedDict")
    assert not isinstance_if_loaded({}, "collections", "OrderedDict")
    assert not isinstance_if_loaded(OrderedDict(), "collections", "NoSuchClass")
    # A module attribute that is not a class is not a type to check against.
    assert not isinstance_if_loaded(OrderedDict(), "collections", "namedtuple")


def test_a_module_never_imported_stays_unimported() -> None:
    code = (
        "import sys\n"
        "from scar_core._lazy import isinstance_if_loaded\n"
        "assert not isinstance_if_loaded(object(), 'xml.dom.minidom', 'Document')\n"
        "assert 'xml.dom.minidom' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
