"""A private PostgreSQL cluster made with Debian's binaries, on its own port, owned by the stack."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from eosbatch.stack import processes
from eosbatch.stack.exceptions import StackError, StackNotReady

DATABASE = "eosbatch"
USER = "eosbatch"
STANDBY_MARK = "is-replica"  # beside a replica's data folder: start never initdbs it
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def find_bindir() -> Path | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]),
                            reverse=True):
        if Path(candidate, "initdb").exists():
            return Path(candidate)
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def install_with_apt(log: Path) -> Path:
    if os.geteuid() != 0:
        raise StackError("postgres: no PostgreSQL binaries found and not root; install the `postgresql` package")
    with log.open("ab") as out:
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"]):
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False,
                                  env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
            if done.returncode != 0:
                raise StackError(f"postgres: `{' '.join(command)}` failed; see {log}")
    bindir = find_bindir()
    if bindir is None:
        raise StackError(f"postgres: installed the package but found no initdb; see {log}")
    return bindir


def _traversable_by(user: str, path: Path) -> bool:
    probe = subprocess.run(["runuser", "-u", user, "--", "test", "-x", str(path)], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return probe.returncode == 0


def _cluster_home(home: Path, folder: str = "postgres") -> Path:
    """`home/<folder>` (`postgres`; the replica's `postgres-replica`), unless the `postgres` user (which runs
    the server when we are root) cannot reach it, as inside a private temp folder: then a folder of its own
    under /var/lib/eosbatch, one per home."""
    wanted = home / folder
    if os.geteuid() != 0:
        return wanted
    existing = wanted
    while not existing.exists():
        existing = existing.parent
    if _traversable_by("postgres", existing):
        return wanted
    digest = hashlib.sha1(str(home).encode()).hexdigest()[:12]
    fallback = Path("/var/lib/eosbatch") / digest / folder
    fallback.parent.mkdir(parents=True, exist_ok=True)
    fallback.parent.parent.chmod(0o755)
    fallback.parent.chmod(0o755)
    return fallback


class PostgresCluster:
    """One PostgreSQL server of the stack: the primary (`home/postgres`), or a streaming replica
    (`home/postgres-replica`, see eosbatch.stack.replica) that `start` never initdbs: it is made by
    pg_basebackup from the primary."""

    def __init__(self, home: Path, port: int, folder: str = "postgres") -> None:
        self.home = _cluster_home(home, folder)
        self.port = port
        self.log = self.home / "postgres.log"
        self.data = self.home / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def pid(self) -> int | None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None
        return pid if processes.alive(pid) else None

    def _as_owner(self, command: list[str]) -> list[str]:
        # initdb and postgres refuse to run as root, so as root they run as the `postgres` user.
        return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command

    def install(self) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        return find_bindir() or install_with_apt(self.home / "apt.log")

    def start(self, bindir: Path) -> None:
        if self.pid() is not None:
            return
        if os.geteuid() == 0:
            shutil.chown(self.home, "postgres")
        if not (self.data / "PG_VERSION").exists():
            if (self.home / STANDBY_MARK).exists():
                raise StackError(f"postgres: {self.data} holds no server; a replica is made by pg_basebackup")
            shutil.rmtree(self.data, ignore_errors=True)
            self._run([str(bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", USER, "-E", "UTF8",
                       "--no-sync"], "initdb")
        # max_wal_size: at the default 1GB a 1M-record run crossed a checkpoint every ~20 s ("checkpoints are
        # occurring too frequently"), and each one makes the next write of every page log a full image. With
        # 8GB, 2 overlapped batches of 500k took 14.07-14.88 s against 14.62-15.27 s (alternating, 4 each);
        # 4GB spaces checkpoints ~2GB of WAL apart (about one per bench round) with less of the disk.
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
                   "-c max_connections=200 -c shared_buffers=256MB -c max_wal_size=4GB -c fsync=on "
                   "-c max_prepared_transactions=0")
        self._run([str(bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
                   "-w", "-t", "60", "start"], "pg_ctl start")

    def _run(self, command: list[str], step: str) -> None:
        with (self.home / "setup.log").open("ab") as out:
            done = subprocess.run(self._as_owner(command), stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise StackError(f"postgres: {step} failed; see {self.home / 'setup.log'} and {self.log}:\n"
                             f"{processes.tail(self.home / 'setup.log')}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        import psycopg2

        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                connection = psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres",
                                              connect_timeout=3)
            except psycopg2.OperationalError as exc:
                last = str(exc).strip()
                time.sleep(0.3)
                continue
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{DATABASE}"')  # a constant, not user input
            connection.close()
            return
        raise StackNotReady(f"postgres: no connection after {timeout:.0f}s ({last}); see {self.log}")

    def add_password_role(self, role: str, password: str, database: str) -> str:
        """A LOGIN role that is no superuser and may not create roles or databases, authenticated with
        SCRAM-SHA-256 (a pg_hba line for it ahead of the trust lines), and a database of the stack's user in
        which it may create schemas (the ledger's) and tables in `public` (its sinks), but no temporary
        tables: it owns only what it creates. Idempotent (sets the password again). Returns its SQLAlchemy
        URL without the password."""
        import psycopg2
        from psycopg2 import sql

        for field, name in (("role", role), ("database", database)):
            if not _NAME.fullmatch(name):
                raise StackError(f"postgres: {field} {name!r}: expected a lower-case identifier ([a-z_][a-z0-9_]*)")
        hba = self.data / "pg_hba.conf"
        line = f"host all {role} 127.0.0.1/32 scram-sha-256\n"
        if line not in hba.read_text():
            hba.write_text(line + hba.read_text())  # first match wins: ahead of `host all all ... trust`

        def superuser(dbname: str) -> psycopg2.extensions.connection:
            connection = psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, dbname=dbname,
                                          connect_timeout=10)
            connection.autocommit = True
            return connection

        connection = superuser("postgres")
        try:
            with connection.cursor() as cursor:
                cursor.execute("SET password_encryption = 'scram-sha-256'")
                cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
                verb = "ALTER" if cursor.fetchone() else "CREATE"
                cursor.execute(sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %s"
                                       ).format(sql.Identifier(role)), (password,))
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
                if cursor.fetchone() is None:
                    cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
                cursor.execute(sql.SQL("GRANT CONNECT, CREATE ON DATABASE {} TO {}").format(
                    sql.Identifier(database), sql.Identifier(role)))
                # hardened as many are: no temporary tables (PUBLIC has them by default), so eosbatch must not
                # need any
                cursor.execute(sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC").format(
                    sql.Identifier(database)))
                cursor.execute("SELECT pg_reload_conf()")
        finally:
            connection.close()
        connection = superuser(database)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(role)))
        finally:
            connection.close()
        return f"postgresql+psycopg2://{role}@127.0.0.1:{self.port}/{database}"

    def stop(self, bindir: Path | None, mode: str = "fast") -> bool:
        """`pg_ctl stop -m <mode>`: "fast" (a clean shutdown), or "immediate" (every process ends at once,
        no checkpoint: a crash, as the server sees it). False when it was not running."""
        pid = self.pid()
        if pid is None:
            return False
        if bindir is not None:
            subprocess.run(self._as_owner([str(bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w",
                                           "-t", "60", "stop"]), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            processes.wait_dead(pid, 60.0, f"postgres on port {self.port}")
        return True

    def in_recovery(self) -> bool | None:
        """True on a standby, False on a primary, None when it does not answer."""
        import psycopg2

        try:
            connection = psycopg2.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres",
                                          connect_timeout=3)
        except psycopg2.OperationalError:
            return None
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_is_in_recovery()")
                return bool(cursor.fetchone()[0])
        finally:
            connection.close()

    def version(self, bindir: Path) -> str:
        out = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=False)
        found = re.search(r"\(PostgreSQL\) (\S+)", out.stdout)
        return found.group(1) if found else "?"

