// The Temporal connection from the standard config file's profile (TEMPORAL_CONFIG_FILE,
// TEMPORAL_PROFILE) under the TEMPORAL_* variables, through @temporalio/envconfig (config/temporal-env.ts).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { ConfigError, loadConfig, redact } from '../../config/load.js';

const tmp = mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-temporal-profile-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

function file(name: string, text: string): string {
  const f = path.join(tmp, name);
  writeFileSync(f, text);
  return f;
}

const toml = file(
  'temporal.toml',
  `[profile.default]
address = "localhost:7233"

[profile.cluster]
address = "temporal.internal:7233"
namespace = "train"
api_key = "from-file"
[profile.cluster.tls]
client_cert_path = "/etc/tempo/client.pem"
client_key_path = "/etc/tempo/client.key"
server_ca_cert_path = "/etc/tempo/ca.pem"
server_name = "temporal.internal"

[profile.inline]
address = "x.tmprl.cloud:7233"
[profile.inline.tls]
client_cert_data = "CERT PEM"
client_key_data = "KEY PEM"
`,
);
const base = { TEMPORAL_CONFIG_FILE: toml, TEMPO_RL_STATE_DIR: path.join(tmp, 'state') };
const fails = (env: NodeJS.ProcessEnv, ...says: RegExp[]) =>
  assert.throws(
    () => loadConfig({ env }),
    (err: unknown) => {
      assert.ok(err instanceof ConfigError, String(err));
      for (const re of says) assert.match(err.message, re);
      return true;
    },
  );

test('the profile TEMPORAL_PROFILE names gives address, namespace, API key and TLS paths', () => {
  const t = loadConfig({ env: { ...base, TEMPORAL_PROFILE: 'cluster' } }).temporal;
  assert.equal(t.address, 'temporal.internal:7233');
  assert.equal(t.namespace, 'train');
  assert.equal(t.api_key, 'from-file');
  assert.deepEqual(
    { ...t.tls },
    {
      enabled: true,
      client_cert_path: '/etc/tempo/client.pem',
      client_key_path: '/etc/tempo/client.key',
      server_ca_cert_path: '/etc/tempo/ca.pem',
      client_cert_data: '',
      client_key_data: '',
      server_ca_cert_data: '',
      server_name: 'temporal.internal',
    },
  );
});

test("without TEMPORAL_PROFILE the file's default profile counts", () => {
  assert.equal(loadConfig({ env: base }).temporal.address, 'localhost:7233');
});

test('the TEMPORAL_* variables override the profile; TEMPO_RL__ and --set override both', () => {
  const env = {
    ...base,
    TEMPORAL_PROFILE: 'cluster',
    TEMPORAL_NAMESPACE: 'other',
    TEMPORAL_TLS_CLIENT_CERT_PATH: '/env/c.pem',
    TEMPORAL_TLS: 'off',
  };
  const t = loadConfig({ env }).temporal;
  assert.equal(t.address, 'temporal.internal:7233');
  assert.equal(t.namespace, 'other');
  assert.equal(t.tls.client_cert_path, '/env/c.pem');
  assert.equal(t.tls.enabled, false);
  assert.equal(loadConfig({ env: { ...env, TEMPO_RL__TEMPORAL__NAMESPACE: 'tempo' } }).temporal.namespace, 'tempo');
  assert.equal(loadConfig({ env, sets: ['temporal.namespace=flag'] }).temporal.namespace, 'flag');
});

test('the profile beats the YAML file (it is the environment layer); an empty TEMPORAL_ADDRESS means the embedded server', () => {
  const yaml = file('c.yaml', 'temporal:\n  address: yaml.host:7233\n  namespace: from-yaml\n');
  const t = loadConfig({ file: yaml, env: { ...base, TEMPORAL_PROFILE: 'cluster' } }).temporal;
  assert.equal(t.address, 'temporal.internal:7233');
  assert.equal(loadConfig({ file: yaml, env: { ...base, TEMPORAL_ADDRESS: '' } }).temporal.address, '');
  assert.equal(loadConfig({ file: yaml, env: { TEMPORAL_NAMESPACE: '' } }).temporal.namespace, 'from-yaml');
});

test("inline PEM data in a profile is kept as *_data (and replaces a lower layer's path); the key is redacted", () => {
  const yaml = file('certs.yaml', 'temporal:\n  tls:\n    client_cert_path: /yaml/c.pem\n');
  const cfg = loadConfig({ file: yaml, env: { ...base, TEMPORAL_PROFILE: 'inline' } });
  assert.equal(cfg.temporal.tls.client_cert_data, 'CERT PEM');
  assert.equal(cfg.temporal.tls.client_cert_path, '');
  assert.equal(cfg.temporal.tls.client_key_data, 'KEY PEM');
  assert.equal((redact(cfg) as { temporal: { tls: { client_key_data: string } } }).temporal.tls.client_key_data, '***');
  assert.throws(
    () => loadConfig({ env: {}, sets: ['temporal.tls.client_key_path=/k', 'temporal.tls.client_key_data=PEM'] }),
    /client_key_path or client_key_data, not both/,
  );
});

test('a malformed TOML file fails naming the file', () => {
  const bad = file('bad.toml', '[profile.default\naddress = "x"\n');
  fails({ TEMPORAL_CONFIG_FILE: bad }, new RegExp(`${bad.replace(/[.]/g, '\\.')} is not valid TOML`));
});

test('a missing file, an unknown profile or key, and a bad TEMPORAL_TLS fail naming what is wrong', () => {
  fails({ TEMPORAL_CONFIG_FILE: path.join(tmp, 'none.toml') }, /TEMPORAL_CONFIG_FILE=.*none\.toml: no such file/);
  fails({ ...base, TEMPORAL_PROFILE: 'nope' }, /temporal\.toml, profile "nope"/, /not found/);
  fails(
    { TEMPORAL_CONFIG_FILE: file('typo.toml', '[profile.default]\nadress = "x"\n') },
    /typo\.toml, profile "default"/,
    /adress/,
  );
  fails({ ...base, TEMPORAL_TLS: 'maybe' }, /TEMPORAL_TLS="maybe"/);
  fails({ TEMPORAL_GRPC_META_X_TEAM: 'a' }, /TEMPORAL_GRPC_META_X_TEAM is not supported/);
  fails(
    { TEMPORAL_CONFIG_FILE: file('meta.toml', '[profile.default.grpc_meta]\nx-team = "a"\n') },
    /meta\.toml, profile "default": grpc_meta is not supported/,
  );
});

test('the default file ($XDG_CONFIG_HOME/temporalio/temporal.toml) is read only when TEMPORAL_PROFILE chooses a profile', () => {
  const xdg = path.join(tmp, 'xdg');
  assert.equal(loadConfig({ env: { XDG_CONFIG_HOME: xdg } }).temporal.address, '', 'no file, none chosen: nothing');
  fails({ XDG_CONFIG_HOME: xdg, TEMPORAL_PROFILE: 'default' }, /profile "default"/, /not found/);
  const dir = path.join(xdg, 'temporalio');
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    path.join(dir, 'temporal.toml'),
    '[profile.default]\nnamespace = "xdg"\naddress = "cloud.example:7233"\n',
  );
  assert.equal(loadConfig({ env: { XDG_CONFIG_HOME: xdg, TEMPORAL_PROFILE: 'default' } }).temporal.namespace, 'xdg');
  const unchosen = loadConfig({ env: { XDG_CONFIG_HOME: xdg } }).temporal;
  assert.equal(unchosen.address, '', 'not chosen: the embedded server, whatever the user-wide file says');
  assert.equal(unchosen.namespace, 'default');
});
