// Where a rollout step's time goes (prints numbers; not a test): one GRPO run on the demo's settings
// (configs/cpu-tiny.yaml, no evals) on a fresh Temporal server, then, from the episode workflows'
// histories, each activity's queue and execution time, the workflow tasks' queue and processing time,
// and the CPU seconds each process used during the run.
//
//   node --import tsx bench/rollout-profile.ts [--steps 1] [--warm DIR] [--set k=v]…
//
// --warm: the policy to roll out (a warm-start model directory; default: the tiny model, whose
// episodes are one turn of random text). --set: config keys, as `tempo-rl --set` takes them.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { temporal } from '@temporalio/proto';
import { withSets } from '../config/load.js';
import { activityCalls } from '../client/audit.js';
import { runHandle, startOrContinueRun } from '../client/run-client.js';
import { readStepRecords } from '../activities/run.js';
import { runDir } from '../stores/layout.js';
import { startDemoRunFixture } from '../testing/run.js';
import { STEP_TIME_KEYS } from '../protocol/training-run.js';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '1' },
    warm: { type: 'string' },
    set: { type: 'string', multiple: true, default: [] },
  },
});

/** CPU seconds per process of ours (by a short name), from ps. */
function cpuSeconds(): Map<string, number> {
  const out = new Map<string, number>();
  const names: Array<[RegExp, string]> = [
    [/VLLM::Worker/, 'vllm worker'],
    [/VLLM::EngineCore/, 'vllm engine core'],
    [/api_server/, 'vllm api server'],
    [/start-dev/, 'temporal server'],
    [/worker rollout/, 'rollout worker'],
    [/trainer\.worker/, 'trainer worker'],
  ];
  for (const line of execFileSync('ps', ['-eo', 'cputimes,args', '--no-headers']).toString().split('\n')) {
    const m = /^\s*(\d+)\s+(.*)$/.exec(line);
    const name = m && names.find(([re]) => re.test(m[2]!))?.[1];
    if (name) out.set(name, (out.get(name) ?? 0) + Number(m[1]));
  }
  return out;
}

const ms = (t: temporal.api.history.v1.IHistoryEvent) =>
  Number(t.eventTime!.seconds) * 1000 + (t.eventTime!.nanos ?? 0) / 1e6;

const fx = await startDemoRunFixture([`run.steps=${values.steps}`, 'run.eval_interval=0', 'run.eval_at_start=false']);
try {
  const cfg = withSets(fx.cfg, [...(values.warm ? [`model.path=${path.resolve(values.warm)}`] : []), ...values.set]);
  const runId = `profile-${Date.now()}`;
  const cpu0 = cpuSeconds();
  const t0 = Date.now();
  await startOrContinueRun(fx.client, cfg, runId);
  await runHandle(fx.client, runId).result();
  const wall = (Date.now() - t0) / 1000;
  const cpu1 = cpuSeconds();

  const acts = new Map<string, { n: number; queue: number; exec: number }>();
  const wft = { n: 0, queue: 0, proc: 0 };
  // The quick steps are local activities: no queue, their time is inside the workflow tasks' processing.
  const locals = new Map<string, number>();
  let episodes = 0;
  for await (const wf of fx.client.workflow.list({ query: `WorkflowType = 'episode'` })) {
    episodes++;
    const history = await fx.client.workflow.getHandle(wf.workflowId, wf.runId).fetchHistory();
    const events = history.events ?? [];
    for (const c of activityCalls(history)) if (c.local) locals.set(c.type, (locals.get(c.type) ?? 0) + 1);
    const byId = new Map(events.map((e) => [Number(e.eventId), e]));
    for (const e of events) {
      const done = e.activityTaskCompletedEventAttributes;
      if (done) {
        const scheduled = byId.get(Number(done.scheduledEventId))!;
        const started = byId.get(Number(done.startedEventId))!;
        const name = scheduled.activityTaskScheduledEventAttributes!.activityType!.name!;
        const a = acts.get(name) ?? { n: 0, queue: 0, exec: 0 };
        acts.set(name, {
          n: a.n + 1,
          queue: a.queue + ms(started) - ms(scheduled),
          exec: a.exec + ms(e) - ms(started),
        });
      }
      const task = e.workflowTaskCompletedEventAttributes;
      if (task) {
        const scheduled = byId.get(Number(task.scheduledEventId))!;
        const started = byId.get(Number(task.startedEventId))!;
        Object.assign(wft, {
          n: wft.n + 1,
          queue: wft.queue + ms(started) - ms(scheduled),
          proc: wft.proc + ms(e) - ms(started),
        });
      }
    }
  }
  const steps = (await readStepRecords(runDir(cfg, runId))).map((r) => r.metrics);
  const per = (k: string) => steps.map((m) => Math.round((m[k] ?? Number.NaN) * 10) / 10);
  const print = (s: string) => process.stdout.write(`${s}\n`);
  print(`run: ${wall.toFixed(1)} s, ${steps.length} steps, ${episodes} episodes`);
  for (const k of STEP_TIME_KEYS) print(`${k} per step: ${per(k).join(' ')}`);
  print('activity            count  queue ms  exec ms');
  for (const [name, a] of acts)
    print(
      `${name.padEnd(20)}${String(a.n).padStart(5)}${(a.queue / a.n).toFixed(1).padStart(10)}${(a.exec / a.n).toFixed(1).padStart(9)}`,
    );
  for (const [name, n] of locals)
    print(`${name.padEnd(20)}${String(n).padStart(5)}  local: inside the workflow tasks below`);
  print(
    `workflow tasks      ${String(wft.n).padStart(5)}${(wft.queue / wft.n).toFixed(1).padStart(10)}${(wft.proc / wft.n).toFixed(1).padStart(9)}  (processing)`,
  );
  print(`CPU seconds during the run (${wall.toFixed(0)} s wall):`);
  for (const [name, s] of cpu1) print(`  ${name.padEnd(18)}${String(s - (cpu0.get(name) ?? 0)).padStart(5)}`);
} finally {
  await fx.close();
}
