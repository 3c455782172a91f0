"""The trainer's Client.connect arguments (worker.connect_kwargs) from a Temporal config profile and
from the standard TEMPORAL_* variables, through temporalio.envconfig; no server needed."""

from pathlib import Path

from temporalio.service import TLSConfig

from trainer.worker.main import connect_kwargs

PROFILE = """
[profile.default]
address = "localhost:7233"

[profile.cloud]
address = "ns.acct.tmprl.cloud:7233"
namespace = "ns.acct"
api_key = "from-file"

[profile.mtls]
address = "temporal.internal:7233"
namespace = "train"
[profile.mtls.tls]
client_cert_path = "{cert}"
client_key_path = "{key}"
server_name = "temporal.internal"
"""


def profile_file(tmp_path: Path) -> Path:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("CERT")
    key.write_text("KEY")
    f = tmp_path / "temporal.toml"
    f.write_text(PROFILE.format(cert=cert, key=key))
    return f


def test_a_profile_file_gives_address_namespace_and_api_key(tmp_path):
    env = {"TEMPORAL_CONFIG_FILE": str(profile_file(tmp_path)), "TEMPORAL_PROFILE": "cloud"}
    kw = connect_kwargs(env=env)
    assert kw["target_host"] == "ns.acct.tmprl.cloud:7233" and kw["namespace"] == "ns.acct"
    assert kw["api_key"] == "from-file" and kw["tls"] is True  # an API key means TLS


def test_a_profile_file_gives_mtls(tmp_path):
    env = {"TEMPORAL_CONFIG_FILE": str(profile_file(tmp_path)), "TEMPORAL_PROFILE": "mtls"}
    tls = connect_kwargs(env=env)["tls"]
    assert isinstance(tls, TLSConfig)
    assert (tls.client_cert, tls.client_private_key, tls.domain) == (b"CERT", b"KEY", "temporal.internal")


def test_variables_override_the_profile_and_flags_override_both(tmp_path):
    env = {
        "TEMPORAL_CONFIG_FILE": str(profile_file(tmp_path)),
        "TEMPORAL_PROFILE": "cloud",
        "TEMPORAL_NAMESPACE": "from-env",
        "TEMPORAL_API_KEY": "env-key",
    }
    kw = connect_kwargs(env=env)
    assert (kw["target_host"], kw["namespace"], kw["api_key"]) == ("ns.acct.tmprl.cloud:7233", "from-env", "env-key")
    kw = connect_kwargs("127.0.0.1:7300", "flag-ns", env=env)
    assert (kw["target_host"], kw["namespace"]) == ("127.0.0.1:7300", "flag-ns")


def test_without_the_file_only_variables_count(tmp_path):
    """tempo-rl's own launch (--no-config-file): the resolved TEMPORAL_* variables, inline PEM included."""
    env = {
        "TEMPORAL_CONFIG_FILE": str(profile_file(tmp_path)),
        "TEMPORAL_PROFILE": "cloud",
        "TEMPORAL_ADDRESS": "10.0.0.5:7233",
        "TEMPORAL_TLS": "true",
        "TEMPORAL_TLS_SERVER_CA_CERT_DATA": "CA PEM",
        "TEMPORAL_TLS_SERVER_NAME": "t.example",
    }
    kw = connect_kwargs(config_file=False, env=env)
    assert kw["target_host"] == "10.0.0.5:7233" and kw["namespace"] == "default" and "api_key" not in kw
    assert isinstance(kw["tls"], TLSConfig)
    assert (kw["tls"].server_root_ca_cert, kw["tls"].domain) == (b"CA PEM", "t.example")


def test_nothing_set_means_the_local_dev_server(tmp_path):
    kw = connect_kwargs(env={"HOME": str(tmp_path)})
    assert (kw["target_host"], kw["namespace"]) == ("127.0.0.1:7233", "default")
    assert not kw.get("tls")
