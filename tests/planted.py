"""What a crafted file in a results folder would carry: a pickle that runs code when loaded.
Tests plant it where clusterbench might read, then check that it never ran."""

from __future__ import annotations

import pathlib
import pickle


class Payload:
    """Unpickling this creates ``marker``: what a crafted file's ``os.system`` would do."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def planted_pickle(marker: pathlib.Path) -> bytes:
    """A pickle that creates ``marker`` when loaded (checked live here, the marker removed)."""
    payload = pickle.dumps(Payload(marker))
    pickle.loads(payload)
    assert marker.exists()  # the plant is live ...
    marker.unlink()
    return payload
