// One pino logger for the whole TS side: JSON lines by default, pretty on a terminal.
// Logs go to stderr so that `--json` output on stdout stays one clean object.
import pino, { type Logger } from 'pino';

function build(): Logger {
  const level = process.env.TEMPO_RL_LOG_LEVEL ?? 'info';
  const pretty = process.stderr.isTTY && process.env.TEMPO_RL_LOG_FORMAT !== 'json';
  if (pretty) {
    return pino({
      level,
      transport: { target: 'pino-pretty', options: { destination: 2, colorize: true, ignore: 'pid,hostname' } },
    });
  }
  return pino({ level, base: { pid: process.pid } }, pino.destination(2));
}

export const log: Logger = build();

export function childLogger(component: string): Logger {
  return log.child({ component });
}
