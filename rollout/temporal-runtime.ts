// Routes the Temporal SDK's logs (TS side and, forwarded, the Rust core) through our pino logger.
import { Runtime, type LogLevel, type LogMetadata, type Logger as TemporalLogger } from '@temporalio/worker';
import { childLogger } from '../base/log.js';

const pinoLog = childLogger('temporal');

class PinoTemporalLogger implements TemporalLogger {
  log(level: LogLevel, message: string, meta?: LogMetadata): void {
    const method = ({ TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' } as const)[level];
    // pino serialises errors under `err`; the SDK passes them as `error`.
    const { error, ...rest } = (meta ?? {}) as LogMetadata & { error?: unknown };
    pinoLog[method](error === undefined ? rest : { ...rest, err: error }, message);
  }
  trace(message: string, meta?: LogMetadata) {
    this.log('TRACE', message, meta);
  }
  debug(message: string, meta?: LogMetadata) {
    this.log('DEBUG', message, meta);
  }
  info(message: string, meta?: LogMetadata) {
    this.log('INFO', message, meta);
  }
  warn(message: string, meta?: LogMetadata) {
    this.log('WARN', message, meta);
  }
  error(message: string, meta?: LogMetadata) {
    this.log('ERROR', message, meta);
  }
}

let installed = false;

export function installTemporalRuntime(): void {
  if (installed) return;
  installed = true;
  Runtime.install({
    logger: new PinoTemporalLogger(),
    telemetryOptions: { logging: { filter: { core: 'WARN', other: 'WARN' }, forward: {} } },
  });
}
