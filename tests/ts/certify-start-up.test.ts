// The certification harness restarts what dies; a worker that cannot start at all (a missing Python
// package, say) must end the run with its name instead of being restarted until a time limit.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type Exited, StartUpDeaths } from '../../testing/start-up-deaths.js';

const exited = (code: number | null, signal: string | null = null) =>
  ({ exitCode: code, signalCode: signal }) as Exited;

test('the fifth start-up death in a row of one kind fails, naming it and its exit code', () => {
  const deaths = new StartUpDeaths();
  let child = exited(1);
  for (let i = 0; i < 4; i++) child = deaths.restart('trainer', child, () => exited(1));
  assert.throws(
    () => deaths.restart('trainer', child, () => exited(1)),
    /the trainer exited by itself \(code 1\).*5 times/,
  );
});

test('kill points (signals) and clean exits do not count; another kind keeps its own count', () => {
  const deaths = new StartUpDeaths();
  for (let i = 0; i < 10; i++) {
    deaths.restart('trainer', exited(null, 'SIGKILL'), () => exited(null, 'SIGKILL'));
    deaths.restart('rollout worker', exited(0), () => exited(0));
  }
  for (let i = 0; i < 4; i++) deaths.restart('trainer', exited(1), () => exited(1));
  deaths.restart('rollout worker', exited(1), () => exited(1));
  // a SIGKILL between start-up deaths resets the trainer's count
  deaths.restart('trainer', exited(null, 'SIGKILL'), () => exited(1));
  for (let i = 0; i < 4; i++) deaths.restart('trainer', exited(1), () => exited(1));
});
