// Durability: SIGKILL the rollout worker (a child process) while an episode is in its second turn;
// a new worker finishes it from the history, and the first turn is never generated again. The
// environment's state survives too: the new worker's step reads the state the dead one's returned.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { activityCalls } from '../../client/audit.js';
import { REPO_ROOT } from '../../base/paths.js';
import { connectClient } from '../../supervise/temporal.js';
import { RolloutConfig } from '../../config/schema.js';
import { getEnvironment } from '../../lib/env/registry.js';
import { episode } from '../../workflows/episode.js';
import { episodeSettings, episodeStartOptions, type EpisodeInput } from '../../protocol/episode.js';
import { recordHistory } from '../../testing/history-fixtures.js';
import { startTestServer, stopChild } from '../../testing/temporal.js';

const server = await startTestServer();
const children: ChildProcess[] = [];
after(async () => {
  for (const c of children) await stopChild(c, 'SIGKILL');
  await server.stop();
});

function startWorker(
  mode: 'block' | 'normal',
  marker: string,
  scenario: 'geo3k' | 'arithmetic' = 'geo3k',
): Promise<ChildProcess> {
  const script = path.join(REPO_ROOT, 'testing', 'episode-worker-child.ts');
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', script, server.stateDir, String(server.cfg.server.port), mode, marker, scenario],
    {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  children.push(child);
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => d.toString().includes('worker-ready') && resolve(child));
    child.once('exit', (code) => reject(new Error(`worker exited early (${code})`)));
  });
}

test('SIGKILL during turn 2: a new worker finishes the episode; turn 1 is generated exactly once', {
  timeout: 240_000,
}, async () => {
  const marker = path.join(mkdtempSync(path.join(os.tmpdir(), 'episode-kill-')), 'in-turn-2');
  const first = await startWorker('block', marker);
  const client = await connectClient(server.cfg);
  try {
    const input: EpisodeInput = {
      run_id: 'run-kill',
      step: 0,
      prompt_index: 0,
      sample_index: 0,
      prompt: {
        messages: [{ role: 'user', content: 'What is 6*10?' }],
        tools: [{ type: 'function', function: { name: 'calc_score', parameters: {} } }],
      },
      label: '60',
      settings: episodeSettings(RolloutConfig.parse({ max_turns: 3, max_response_len: 2000 }), {
        generate_timeout_s: 120,
      }),
      weight_version: 0,
    };
    const opts = episodeStartOptions('run-kill/0/0/0');
    const handle = await client.workflow.start(episode, {
      taskQueue: server.cfg.temporal.task_queues.rollout,
      ...opts,
      args: [input],
    });
    for (let i = 0; !existsSync(marker); i++) {
      assert.ok(i < 600, 'the episode never reached its second turn');
      await new Promise((r) => setTimeout(r, 100));
    }
    first.kill('SIGKILL');
    await new Promise((r) => first.once('exit', r));
    await startWorker('normal', marker);
    const summary = await handle.result();
    assert.deepEqual([summary.status, summary.reward, summary.turns], ['COMPLETED', 1, 2]);

    const calls = activityCalls(await handle.fetchHistory());
    const generates = calls.filter((c) => c.type === 'generateTurn');
    assert.equal(
      generates.filter((c) => (c.input as { turn: number }).turn === 1).length,
      1,
      'exactly one generate for turn 1',
    );
    assert.equal(generates.length, 2);
    assert.equal((generates[0]!.result as { attempt: number }).attempt, 1);
    assert.ok((generates[1]!.result as { attempt: number }).attempt >= 2, 'turn 2 was retried after the kill');
    // The new worker found the dead one's turn in the in-flight ledger and failed it over at once (rollout/inflight.ts).
    assert.equal(
      generates[1]!.retried_after,
      'WorkerDied',
      'failed over by the next worker, not left to the heartbeat timeout',
    );
    assert.equal(calls.filter((c) => c.type === 'renderPrompt').length, 1, 'the prompt was rendered once');
    await recordHistory(client, opts.workflowId, 'episode-worker-killed-in-turn-2');
  } finally {
    await client.connection.close();
  }
});

test('SIGKILL during turn 2 of an arithmetic episode: the new worker steps from the state the first left (ans)', {
  timeout: 240_000,
}, async () => {
  // workers of the test before poll the same task queue with another script: only this test's
  for (const c of children.splice(0)) await stopChild(c, 'SIGKILL');
  const marker = path.join(mkdtempSync(path.join(os.tmpdir(), 'episode-kill-arith-')), 'in-turn-2');
  const first = await startWorker('block', marker, 'arithmetic');
  const client = await connectClient(server.cfg);
  try {
    const env = getEnvironment('arithmetic');
    const row = { id: 'a', problem: 'Compute (14 + 9) * 3 - 25.', answer: '44', images: [] };
    const input: EpisodeInput = {
      run_id: 'run-kill-arith',
      step: 0,
      prompt_index: 0,
      sample_index: 0,
      prompt: env.prompt(row, { tools: true }),
      label: row.answer,
      env_state: env.initialState(row),
      settings: episodeSettings(
        RolloutConfig.parse({ environment: 'arithmetic', max_turns: 3, max_response_len: 2000 }),
        { env, generate_timeout_s: 120 },
      ),
      weight_version: 0,
    };
    const opts = episodeStartOptions('run-kill-arith/0/0/0');
    const handle = await client.workflow.start(episode, {
      taskQueue: server.cfg.temporal.task_queues.rollout,
      ...opts,
      args: [input],
    });
    for (let i = 0; !existsSync(marker); i++) {
      assert.ok(i < 600, 'the episode never reached its second turn');
      await new Promise((r) => setTimeout(r, 100));
    }
    first.kill('SIGKILL');
    await new Promise((r) => first.once('exit', r));
    await startWorker('normal', marker, 'arithmetic');
    // ans - 25 is 44 only with ans = 69 from turn 1's state; from a fresh state it is a calculator error
    const summary = await handle.result();
    assert.deepEqual(
      [summary.status, summary.reward, summary.turns, summary.tool_answers],
      ['COMPLETED', 1, 3, [null, null, '44']],
    );
    const steps = activityCalls(await handle.fetchHistory()).filter((c) => c.type === 'envStep');
    // the state turn 2 started from: turn 1's, from the history (the envStep is a local activity: its marker keeps the result)
    assert.deepEqual((steps[0]!.result as { state: unknown }).state, {
      calls: [{ expression: '(14 + 9) * 3', value: '69', error: null }],
      ans: 69,
    });
  } finally {
    await client.connection.close();
  }
});
