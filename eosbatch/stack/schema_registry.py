"""A real Confluent-compatible Schema Registry for the embedded stack: Apicurio Registry 3, on request only.

`eosbatch stack up --schema-registry` (or EOSBATCH_SCHEMA_REGISTRY=1) fetches Apicurio Registry's own server
distribution from Maven Central (`io.apicurio:apicurio-registry-app:<version>:tar.gz:all`, the Quarkus fast-jar
its release attaches to the app's artifact), unpacks it into the stack's cache, and runs `quarkus-run.jar` on
loopback with its default storage, an in-memory H2 database: the schemas live as long as the process. Its
Confluent-compatible API (the one eosbatch.formats.registry.SchemaRegistry and Confluent's serializers speak)
is at `/apis/ccompat/v7`.

Apicurio 3's classes are Java 21 (class file 65), newer than the stack's JDK 17: the server runs on a JDK >= 21
found here (EOSBATCH_SCHEMA_REGISTRY_JAVA_HOME, else JAVA_HOME, else the newest under /usr/lib/jvm), set as
JAVA_HOME for its process only.
"""

from __future__ import annotations

import os
import re
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from eosbatch.stack import maven, processes
from eosbatch.stack.exceptions import StackError, StackNotReady
from eosbatch.stack.versions import APICURIO_REGISTRY_DISTRIBUTION, APICURIO_REGISTRY_VERSION

JAVA_HOME = "EOSBATCH_SCHEMA_REGISTRY_JAVA_HOME"  # the home of a JDK >= 21 for the registry (else found)
MIN_JAVA = 21
CCOMPAT = "/apis/ccompat/v7"  # Apicurio's Confluent-compatible API
JVM_ROOT = Path("/usr/lib/jvm")


def java_major(release: str) -> int | None:
    """The feature version of a JDK from its `release` file's JAVA_VERSION ("25.0.3" -> 25, "1.8.0_412" -> 8)."""
    found = re.search(r'^JAVA_VERSION="?(\d+)(?:\.(\d+))?', release, re.MULTILINE)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def choose_java(explicit: str | None, java_home: str | None, installed: Mapping[Path, int | None]) -> Path | None:
    """The JDK home to run the registry with (pure): `explicit` (EOSBATCH_SCHEMA_REGISTRY_JAVA_HOME) when set,
    whatever its version; else JAVA_HOME, or the newest of `installed` ({home: feature version}), when >= MIN_JAVA."""
    if explicit:
        return Path(explicit)
    if java_home and (installed.get(Path(java_home)) or 0) >= MIN_JAVA:
        return Path(java_home)
    fit = [(version, str(home)) for home, version in installed.items() if version is not None and version >= MIN_JAVA]
    return Path(max(fit)[1]) if fit else None


def _installed_jdks() -> dict[Path, int | None]:
    homes = {Path(p) for p in JVM_ROOT.glob("*") if (Path(p) / "bin" / "java").exists()}
    if os.environ.get("JAVA_HOME"):
        homes.add(Path(os.environ["JAVA_HOME"]))
    found: dict[Path, int | None] = {}
    for home in homes:
        try:
            found[home] = java_major((home / "release").read_text(errors="replace"))
        except OSError:
            found[home] = None
    return found


def find_java() -> Path:
    """The home of a JDK >= MIN_JAVA; StackError saying how to provide one when there is none."""
    home = choose_java(os.environ.get(JAVA_HOME), os.environ.get("JAVA_HOME"), _installed_jdks())
    if home is None or not (home / "bin" / "java").exists():
        raise StackError(f"schema-registry: Apicurio Registry {APICURIO_REGISTRY_VERSION} needs a JDK >= {MIN_JAVA} "
                         f"and none was found (JAVA_HOME, {JVM_ROOT}/*); install one, or set {JAVA_HOME} to its home"
                         + (f" ({home}/bin/java does not exist)" if home is not None else ""))
    return home


class SchemaRegistryServer:
    def __init__(self, home: Path, port: int) -> None:
        self.home = home / "schema-registry"
        self.port = port
        self.management_port = port + 1  # health and metrics (/q/health, /q/metrics)
        self.log = self.home / "schema-registry.log"
        self.pid_file = self.home / "schema-registry.pid"

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL (what SchemaRegistry(url) and Confluent's clients take)."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT}"

    def pid(self) -> int | None:
        return processes.read_pid(self.pid_file)

    def install(self, cache: Path) -> Path:
        """The unpacked distribution (a folder holding quarkus-run.jar); fetched and unpacked once per cache."""
        self.home.mkdir(parents=True, exist_ok=True)
        folder = maven.resolve(f"apicurio-registry-{APICURIO_REGISTRY_VERSION}", [APICURIO_REGISTRY_DISTRIBUTION],
                               cache, self.home / "maven.log", transitive=False)
        app = folder / "app"
        if (app / maven.DONE).exists():
            return app
        archives = maven.files(folder, ".tar.gz")
        if not archives:
            raise StackError(f"schema-registry: {folder} holds no distribution; remove it and run `stack up` again")
        with tarfile.open(archives[0]) as archive:
            archive.extractall(app, filter="data")
        if not (app / "quarkus-run.jar").exists():
            raise StackError(f"schema-registry: {archives[0].name} has no quarkus-run.jar")
        (app / maven.DONE).write_text(APICURIO_REGISTRY_DISTRIBUTION + "\n")
        archives[0].unlink()  # the unpacked copy is what runs; Maven's local repository keeps the archive
        return app

    def start(self, app: Path) -> None:
        if self.pid() is not None:
            return
        java_home = find_java()
        tmp = self.home / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        # Bound to loopback, its management interface (health, metrics; built in, on 0.0.0.0:9000 by default) too,
        # on the next port. No OTLP exporter to reach. C1 only: it starts in about half the time on a busy machine
        # (a test registry serves a few lookups, never a load).
        command = [str(java_home / "bin" / "java"), "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC",
                   "-XX:TieredStopAtLevel=1",
                   f"-Djava.io.tmpdir={tmp}", "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
                   "-Dquarkus.management.host=127.0.0.1",
                   f"-Dquarkus.management.port={self.management_port}", "-Dquarkus.otel.sdk.disabled=true",
                   "-Dquarkus.http.access-log.enabled=false",  # and no line per request in its log:
                   '-Dquarkus.log.category."io.apicurio.registry.logging.audit".level=WARN',
                   "-jar", str(app / "quarkus-run.jar")]
        env = {**os.environ, "JAVA_HOME": str(java_home)}
        processes.spawn(command, self.log, self.pid_file, env=env, cwd=self.home)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as answer:
                return bool(answer.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Ready when its Confluent API lists subjects."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise StackError(f"schema-registry: the server exited during start; see {self.log}:\n"
                                 f"{processes.tail(self.log)}")
            if self.ready():
                return
            time.sleep(0.3)
        raise StackNotReady(f"schema-registry: {self.url} did not answer after {timeout:.0f}s; see {self.log}")

    def stop(self) -> bool:
        return processes.stop(self.pid_file, timeout=20)
