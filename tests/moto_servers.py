"""moto servers in processes of their own, for tests that compare local mode's endpoint with moto's:
what local mode changes in moto (its transactions, its queues) is installed for a whole process.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

#: A server on a free port that prints its URL and serves until SIGTERM: local mode's
#: endpoint ("fair"), or moto's own server with nothing changed ("stock").
SERVE = """
import contextlib, logging, signal, sys
logging.getLogger("werkzeug").setLevel(logging.ERROR)
if sys.argv[1] == "fair":
    from sqsjkr.local.endpoint import local_endpoint
    endpoint = local_endpoint()
else:
    from moto.server import ThreadedMotoServer
    @contextlib.contextmanager
    def stock():
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
        server.stop()
    endpoint = stock()
with endpoint as url:
    print(url, flush=True)
    signal.pause()
"""


def serve(mode: str) -> Iterator[str]:
    """A server of mode ("fair" or "stock"), yielding its URL; for a fixture to yield from."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://"), f"the {mode} server did not start"
        yield url
    finally:
        # Its state dies with it: nothing to stop cleanly, and moto's server takes seconds to.
        process.terminate()
        process.wait(30)
