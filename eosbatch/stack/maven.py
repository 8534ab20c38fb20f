"""Resolve jars from Maven Central with the machine's `mvn` into a reusable cache folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from xml.sax.saxutils import escape

from eosbatch.stack.exceptions import StackError

DONE = ".complete"


def _gav(coordinate: str) -> str:
    """`group:artifact:version[:type[:classifier]]` (a distribution such as `...:tar.gz:all` has both)."""
    group, artifact, version, *rest = coordinate.split(":")
    extra = "".join(f"<{tag}>{escape(value)}</{tag}>" for tag, value in zip(("type", "classifier"), rest, strict=False))
    return (f"<groupId>{escape(group)}</groupId><artifactId>{escape(artifact)}</artifactId>"
            f"<version>{escape(version)}</version>{extra}")


def _pom(name: str, coordinates: list[str], transitive: bool) -> str:
    if transitive:
        body = "<dependencies>" + "".join(f"<dependency>{_gav(c)}</dependency>" for c in coordinates)
        body += "</dependencies>"
    else:
        items = "".join(f"<artifactItem>{_gav(c)}</artifactItem>" for c in coordinates)
        body = ("<build><plugins><plugin><groupId>org.apache.maven.plugins</groupId>"
                "<artifactId>maven-dependency-plugin</artifactId><version>3.6.1</version>"
                f"<configuration><artifactItems>{items}</artifactItems></configuration>"
                "</plugin></plugins></build>")
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>eosbatch.stack</groupId><artifactId>{escape(name)}</artifactId><version>1</version>"
        f"<packaging>pom</packaging>{body}</project>"
    )


def resolve(name: str, coordinates: list[str], cache: Path, log: Path, transitive: bool = True) -> Path:
    """Copy `coordinates` (and, when `transitive`, their runtime dependencies) into `cache/name`.

    A finished folder is reused, so only the first `stack up` reaches Maven Central. Non-transitive
    resolution exists because some poms (Spark's) declare extra repositories this machine cannot reach.
    """
    target = cache / name
    if (target / DONE).exists():
        return target
    if shutil.which("mvn") is None:
        raise StackError("maven: `mvn` is not on PATH (install the `maven` package)")
    work = cache / f".{name}.build"
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "pom.xml").write_text(_pom(name, coordinates, transitive))
    goal = ["dependency:copy-dependencies", "-DincludeScope=runtime"] if transitive else ["dependency:copy"]
    command = ["mvn", "-B", "-q", "-f", str(work / "pom.xml"), *goal, f"-DoutputDirectory={target}"]
    with log.open("ab") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise StackError(f"maven: resolving {name} ({', '.join(coordinates)}) failed; see {log}")
    shutil.rmtree(work, ignore_errors=True)
    (target / DONE).write_text("\n".join(coordinates) + "\n")
    return target


def files(folder: Path, suffix: str) -> list[Path]:
    """What `resolve` copied into `folder` whose names end with `suffix` (e.g. a distribution's `.tar.gz`)."""
    return sorted(p for p in folder.iterdir() if p.name.endswith(suffix))


def jars(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.jar"))
