// The Temporal connection part of the environment layer (config/load.ts): a profile of the standard
// Temporal config file (TEMPORAL_CONFIG_FILE, else ~/.config/temporalio/temporal.toml; TEMPORAL_PROFILE,
// else "default"), read only when one of those two variables is set, with the standard TEMPORAL_*
// variables over it, read by @temporalio/envconfig, the loader every Temporal SDK and the CLI share.
import os from 'node:os';
import path from 'node:path';
import { loadClientConfigProfile, type ClientConfigProfile, type ConfigDataSource } from '@temporalio/envconfig';
import { CONFIG_FILE, readBoundedText, UnreadableFile } from '../base/bounded-file.js';
import { ConfigError, parseBoolVar, parserMessage } from './errors.js';

type Tree = Record<string, unknown>;

/** Variables envconfig would read but tempo-rl has nowhere to put: refused, never dropped. */
const UNSUPPORTED_VARS = [/^TEMPORAL_GRPC_META_/, /^TEMPORAL_TLS_DISABLE_HOST_VERIFICATION$/];

/** The config file envconfig reads (its own rule, which it does not export), for messages. */
export function temporalConfigFile(env: NodeJS.ProcessEnv): string | undefined {
  if (env.TEMPORAL_CONFIG_FILE) return env.TEMPORAL_CONFIG_FILE;
  if (os.platform() === 'darwin')
    return env.HOME ? path.join(env.HOME, 'Library', 'Application Support', 'temporalio', 'temporal.toml') : undefined;
  const base = env.XDG_CONFIG_HOME || (env.HOME ? path.join(env.HOME, '.config') : undefined);
  return base ? path.join(base, 'temporalio', 'temporal.toml') : undefined;
}

/**
 * The environment as envconfig should see it. An empty variable counts as unset (as tempo-rl always
 * did), except TEMPORAL_ADDRESS: empty, it overrides a profile's address, so it still means "the
 * embedded server". TEMPORAL_TLS takes tempo-rl's words (yes/on/...), which envconfig would read as false.
 */
function envForEnvconfig(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined || (value === '' && name.startsWith('TEMPORAL_') && name !== 'TEMPORAL_ADDRESS')) continue;
    if (UNSUPPORTED_VARS.some((re) => re.test(name)))
      throw new ConfigError(
        `config: ${name} is not supported by tempo-rl (no gRPC metadata or host-verification setting); unset it`,
      );
    out[name] = name === 'TEMPORAL_TLS' ? String(parseBoolVar(name, value)) : value;
  }
  return out;
}

/** Sets KEY_path or KEY_data, and clears the other: a lower layer's path must not meet this layer's data. */
function sourceKeys(source: ConfigDataSource | undefined, key: string, tls: Tree): void {
  if (!source) return;
  const isPath = 'path' in source;
  tls[`${key}_path`] = isPath ? source.path : '';
  tls[`${key}_data`] = isPath
    ? ''
    : typeof source.data === 'string'
      ? source.data
      : Buffer.from(source.data).toString('utf8');
}

function toTree(profile: ClientConfigProfile, where: string): Tree {
  if (profile.grpcMeta && Object.keys(profile.grpcMeta).length)
    throw new ConfigError(`config: ${where}: grpc_meta is not supported by tempo-rl; remove it from the profile`);
  const temporal: Tree = {};
  if (profile.address !== undefined) temporal.address = profile.address;
  if (profile.namespace !== undefined) temporal.namespace = profile.namespace;
  if (profile.apiKey !== undefined) temporal.api_key = profile.apiKey;
  if (profile.tls) {
    // As envconfig connects: a TLS section (or TEMPORAL_TLS_* variable) turns TLS on unless it says disabled.
    const tls: Tree = { enabled: profile.tls.disabled !== true };
    if (profile.tls.serverName !== undefined) tls.server_name = profile.tls.serverName;
    sourceKeys(profile.tls.clientCert, 'client_cert', tls);
    sourceKeys(profile.tls.clientKey, 'client_key', tls);
    sourceKeys(profile.tls.serverCACert, 'server_ca_cert', tls);
    temporal.tls = tls;
  }
  return Object.keys(temporal).length ? { temporal } : {};
}

/**
 * The profile file's text, read by tempo-rl's one reader of files (base/bounded-file.ts:
 * a regular file of bounded size, so a FIFO or /dev/zero is refused, not waited on) and handed to
 * envconfig as data. Undefined where there is no file to read: envconfig then finds no profiles (a
 * missing default file is no error; one TEMPORAL_CONFIG_FILE names on purpose is).
 */
function profileText(env: NodeJS.ProcessEnv, file: string | undefined): string | undefined {
  if (!file) return undefined;
  try {
    return readBoundedText(file, CONFIG_FILE);
  } catch (err) {
    if (!(err instanceof UnreadableFile)) throw err;
    const named = Boolean(env.TEMPORAL_CONFIG_FILE);
    if (!named && err.reason === 'no such file') return undefined;
    throw new ConfigError(named ? `config: TEMPORAL_CONFIG_FILE=${file}: ${err.reason}` : `config: ${err.message}`);
  }
}

/** The `temporal.*` keys of the profile and the TEMPORAL_* variables, as a partial config tree. */
export function temporalEnvOverrides(env: NodeJS.ProcessEnv): Tree {
  const overrideEnvVars = envForEnvconfig(env);
  const file = temporalConfigFile(env);
  const where = `${file ?? 'the Temporal config file'}, profile "${env.TEMPORAL_PROFILE || 'default'}"`;
  // The file is read only when chosen (TEMPORAL_CONFIG_FILE or TEMPORAL_PROFILE): a default profile
  // pointing at a Cloud namespace must not silently take `tempo-rl demo` off its embedded server.
  const chosen = Boolean(env.TEMPORAL_CONFIG_FILE || env.TEMPORAL_PROFILE);
  const text = chosen ? profileText(env, file) : undefined;
  const configSource = text === undefined ? undefined : { data: text };
  let profile: ClientConfigProfile;
  try {
    profile = loadClientConfigProfile({ overrideEnvVars, configFileStrict: true, disableFile: !chosen, configSource });
  } catch (err) {
    const message = (err as Error).message;
    // smol-toml's TomlError keeps the name Error; its message is the one sign. Its first line only:
    // the rest quotes the file, which may hold an API key.
    if (/^Invalid TOML document: /.test(message))
      throw new ConfigError(
        `config: ${file} is not valid TOML: ${parserMessage(err).replace(/^Invalid TOML document: /, '')}`,
      );
    throw new ConfigError(`config: ${where}: ${message}`);
  }
  return toTree(profile, where);
}
