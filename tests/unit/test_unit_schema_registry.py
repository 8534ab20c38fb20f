"""The pure parts of the schema registry: SchemaRegistry's settings, the JDK the embedded registry runs on, the
Maven coordinate of its distribution. Its lookups are tested on a real registry (tests/integration)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from eosbatch.exceptions import ConfigError
from eosbatch.formats.registry import SchemaRegistry
from eosbatch.stack.maven import _gav
from eosbatch.stack.schema_registry import MIN_JAVA, choose_java, java_major

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("url", ["registry:8081", "ftp://registry", "http://", "", None])
def test_a_registry_url_that_is_not_http_is_refused_naming_the_field(url) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"^value\.writer_schemas\.url: expected the registry's http\(s\)://"):
        SchemaRegistry(url, field="value.writer_schemas")


def test_the_url_goes_in_url_not_in_the_clients_settings() -> None:
    with pytest.raises(ConfigError, match=r"^writer_schemas\.config: .*without `url`"):
        SchemaRegistry("http://a:1", {"url": "http://b:2"})


def test_a_registry_is_a_value_that_hides_its_credentials_and_pickles_without_its_client() -> None:
    secret = {"basic.auth.user.info": "user:s3cret"}
    registry = SchemaRegistry("https://registry:8081/", secret)
    assert registry == SchemaRegistry("https://registry:8081", secret) != SchemaRegistry("https://registry:8081")
    assert hash(registry) == hash(SchemaRegistry("https://registry:8081"))
    assert "s3cret" not in repr(registry) + str(registry)
    assert registry.config == {"timeout": 10.0, **secret}  # a request never waits forever
    registry._client = object()  # as after a lookup
    copy = pickle.loads(pickle.dumps(registry))
    assert copy == registry and copy._client is None


@pytest.mark.parametrize(("release", "major"), [('JAVA_VERSION="25.0.3"', 25), ('JAVA_VERSION="21"', 21),
                                                 ('JAVA_VERSION="17.0.15"', 17), ('JAVA_VERSION="1.8.0_412"', 8),
                                                 ("IMPLEMENTOR=x", None)])
def test_a_jdks_version_is_read_from_its_release_file(release: str, major: int | None) -> None:
    assert java_major(f'IMPLEMENTOR="Eclipse Adoptium"\n{release}\n') == major


def test_the_registry_runs_on_the_newest_jdk_from_21_unless_told_which() -> None:
    installed = {Path("/jvm/17"): 17, Path("/jvm/25"): 25, Path("/jvm/21"): 21, Path("/jvm/odd"): None}
    assert choose_java(None, None, installed) == Path("/jvm/25")
    assert choose_java(None, "/jvm/21", installed) == Path("/jvm/21")  # JAVA_HOME, when new enough
    assert choose_java(None, "/jvm/17", installed) == Path("/jvm/25")  # the stack's own JDK 17 is too old
    assert choose_java("/opt/jdk", "/jvm/21", installed) == Path("/opt/jdk")  # EOSBATCH_SCHEMA_REGISTRY_JAVA_HOME
    assert choose_java(None, None, {Path("/jvm/17"): 17}) is None and MIN_JAVA == 21


def test_a_distribution_is_fetched_by_type_and_classifier() -> None:
    assert _gav("io.apicurio:apicurio-registry-app:3.3.3:tar.gz:all") == (
        "<groupId>io.apicurio</groupId><artifactId>apicurio-registry-app</artifactId><version>3.3.3</version>"
        "<type>tar.gz</type><classifier>all</classifier>")
    assert _gav("a:b:1").endswith("<version>1</version>")
