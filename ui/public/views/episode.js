// An episode: its prompt as the model saw it (system, user, the figure), then each turn (the model's
// text with its tool call picked out, the tool's feedback, finish reason, engine, weights, retries and
// their cause, times), a retried turn's attempts side by side, and its tokens coloured by the engine's
// logprob or by how far the trainer's is from it (as prime-rl colours tokens by mismatch:
// https://github.com/PrimeIntellect-ai/prime-rl/pull/2551), with the loss mask. The turns are what
// `tempo-rl episodes show --json` prints (the response's `audit`), all of it put in as text.
import { apiPath, api, badge, fill, h, link, num, seconds } from '../dom.js';
import { setCrumbs } from './common.js';
import { promptSection } from './prompt.js';

const TOOL_CALL = /<tool_call>[\s\S]*?(?:<\/tool_call>|$)/g;

/** The turn's text with each tool call in its own element; textContent is the text unchanged. */
export function turnText(text) {
  const parts = [];
  let last = 0;
  for (const m of text.matchAll(TOOL_CALL)) {
    if (m.index > last) parts.push(text.slice(last, m.index));
    parts.push(h('span', { class: 'tool-call', title: 'tool call' }, m[0]));
    last = m.index + m[0].length;
  }
  if (last < text.length) parts.push(text.slice(last));
  return h('pre', { class: 'text', dataset: { field: 'text' } }, parts);
}

function fact(label, value, field) {
  return h(
    'span',
    { class: 'fact' },
    h('span', { class: 'k' }, label),
    ' ',
    h('span', { class: 'v', dataset: field ? { field } : {} }, value),
  );
}

function retries(t) {
  const attempt = t.generate_attempt ?? 1;
  return attempt > 1 ? `attempt ${attempt}, after ${t.generate_retried_after ?? 'a failure'}` : 'none';
}

function auditedTurn(t, timing) {
  return h(
    'article',
    { class: 'turn', dataset: { turn: t.turn } },
    h('h3', {}, `turn ${t.turn}`),
    h(
      'p',
      { class: 'facts' },
      fact('finish', t.finish_reason, 'finish_reason'),
      fact('engine', t.engine, 'engine'),
      fact('weights', t.weight_version === null ? '-' : `v${t.weight_version}`, 'weight_version'),
      fact('generated', `${t.generated_tokens}${t.synthetic_eos ? ' + synthetic EOS' : ''}`, 'generated_tokens'),
      fact('observation tokens', t.observation_tokens),
      fact('mean logprob', num(t.mean_logprob), 'mean_logprob'),
      fact('retries', retries(t), 'retries'),
      t.env_reason ? fact('environment', t.env_reason, 'env_reason') : null,
      timing ? fact('generate', `${seconds(timing.run_ms)} (waited ${seconds(timing.wait_ms)})`, 'timing') : null,
    ),
    turnText(t.text),
    t.observation !== null
      ? h(
          'div',
          { class: 'observation' },
          h('span', { class: 'k' }, 'tool feedback'),
          h('pre', { dataset: { field: 'observation' } }, t.observation),
        )
      : null,
  );
}

/** The number the audit gives the sample's turn i (its turns count from 1). */
function turnNumber(view, i) {
  return view.audit?.turns[i]?.turn ?? i + 1;
}

/** Without a history: each turn's facts from the sample, its text from its tokens. */
function sampleTurns(view) {
  return view.sample.turns.map((t, i) => {
    const span = view.spans[i];
    const text = view.tokens
      .slice(span.gen_start, span.gen_start + span.gen_len)
      .map((tok) => tok[1])
      .join('');
    return h(
      'article',
      { class: 'turn', dataset: { turn: turnNumber(view, i) } },
      h('h3', {}, `turn ${turnNumber(view, i)} (from the sample)`),
      h(
        'p',
        { class: 'facts' },
        fact('finish', t.finish_reason, 'finish_reason'),
        fact('engine', t.engine, 'engine'),
        fact('weights', t.weight_version === null ? '-' : `v${t.weight_version}`, 'weight_version'),
        fact('generated', `${t.generated_tokens}${span.synthetic_eos_at !== null ? ' + synthetic EOS' : ''}`),
        t.tool_answer !== undefined ? fact('answer', t.tool_answer ?? '-') : null,
      ),
      turnText(text),
    );
  });
}

/** Colour classes: by the engine's logprob, or by |trainer − engine| (mismatch). */
function lpClass(lp, mask) {
  if (mask === 0) return 'tok masked';
  if (lp >= -0.05) return 'tok lp0';
  if (lp >= -0.5) return 'tok lp1';
  if (lp >= -1.5) return 'tok lp2';
  if (lp >= -3) return 'tok lp3';
  return 'tok lp4';
}

const MISMATCH = [0.01, 0.05, 0.2, 0.5];
function mismatchClass(lp, mask, trainer) {
  if (mask === 0) return 'tok masked';
  if (trainer === null) return 'tok mm-none';
  const d = Math.abs(trainer - lp);
  const i = MISMATCH.findIndex((t) => d < t);
  return `tok mm${i < 0 ? MISMATCH.length : i}`;
}

function tokenTitle([id, , lp, mask, trainer]) {
  const t = trainer === null ? '' : ` · trainer ${num(trainer, 4)} · Δ ${num(trainer - lp, 4)}`;
  return `token ${id} · engine logprob ${num(lp, 4)}${t} · mask ${mask}`;
}

/** Every response token, turn by turn (view.spans: the generated tokens, the synthetic end-of-turn
 *  token, the feedback), coloured by `mode`; mask-0 tokens grey. */
function strip(view, mode) {
  const el = h('div', { class: 'tokens', dataset: { mode } });
  const cls = (tok) => (mode === 'mismatch' ? mismatchClass(tok[2], tok[3], tok[4]) : lpClass(tok[2], tok[3]));
  const put = (from, n, label, part) => {
    if (n === 0) return;
    if (label) el.append(h('span', { class: 'turn-mark' }, label));
    for (const [k, tok] of view.tokens.slice(from, from + n).entries())
      el.append(h('span', { class: cls(tok), title: tokenTitle(tok), dataset: { i: from + k, part } }, tok[1]));
  };
  let end = 0;
  view.spans.forEach((s, i) => {
    put(s.gen_start, s.gen_len, `turn ${turnNumber(view, i)}`, 'generated');
    if (s.synthetic_eos_at !== null) put(s.synthetic_eos_at, 1, null, 'eos');
    put(s.obs_start, s.obs_len, 'feedback', 'observation');
    end = s.obs_start + s.obs_len;
  });
  put(end, view.tokens.length - end, 'after the turns', 'rest');
  return el;
}

/** The trainer's logprobs against the engine's over the generated tokens: mean and largest |Δ|. */
function mismatchSummary(view) {
  const d = view.tokens.filter((t) => t[3] === 1 && t[4] !== null).map((t) => Math.abs(t[4] - t[2]));
  if (!d.length) return null;
  const mean = d.reduce((a, b) => a + b, 0) / d.length;
  return h(
    'p',
    { class: 'facts', dataset: { field: 'mismatch' } },
    fact('trainer logprobs', `step ${view.trainer_step}'s forward, before its update`),
    fact('mean |trainer − engine|', num(mean, 4), 'mismatch_mean'),
    fact('largest', num(Math.max(...d), 4), 'mismatch_max'),
    fact('tokens', d.length),
  );
}

function tokenSection(view) {
  if (!view.tokens.length) return [h('h2', {}, 'Tokens'), h('p', { class: 'muted' }, 'No sample stored: no tokens.')];
  const hasTrainer = view.trainer_step !== null;
  let mode = 'engine';
  const box = h('div');
  const legend = h('p', { class: 'legend' });
  const draw = () => {
    fill(
      legend,
      mode === 'engine'
        ? [
            'engine logprob: ',
            ['≥ −0.05', '≥ −0.5', '≥ −1.5', '≥ −3', '< −3'].map((t, i) => h('span', { class: `tok lp${i}` }, t)),
          ]
        : [
            '|trainer − engine| logprob: ',
            ['< 0.01', '< 0.05', '< 0.2', '< 0.5', '≥ 0.5'].map((t, i) => h('span', { class: `tok mm${i}` }, t)),
          ],
      ' ',
      h('span', { class: 'tok masked' }, 'loss mask 0'),
    );
    fill(box, strip(view, mode));
  };
  const picker = h(
    'select',
    { 'aria-label': 'colour the tokens by', class: 'token-mode', disabled: !hasTrainer },
    h('option', { value: 'engine' }, 'the engine’s logprob'),
    h('option', { value: 'mismatch' }, 'trainer vs engine (mismatch)'),
  );
  picker.addEventListener('change', () => {
    mode = picker.value;
    draw();
  });
  draw();
  return [
    h('h2', {}, 'Tokens ', h('span', { class: 'muted' }, 'coloured by '), picker),
    hasTrainer
      ? mismatchSummary(view)
      : h(
          'p',
          { class: 'muted' },
          'No trainer logprobs for this sample (not trained, an SFT step, longer than the trainer records, or trained before the trainer wrote them).',
        ),
    legend,
    box,
  ];
}

/** Each retried generate: the attempt that failed beside the one that completed, the facts that
 *  changed marked. */
function retriesSection(view) {
  if (!view.retries.length) return null;
  const row = (label, key, r) =>
    h(
      'tr',
      { class: r.changed.includes(key) ? 'changed' : '' },
      h('th', {}, label),
      h('td', {}, r.failed[key] ?? '-'),
      h('td', {}, r.completed[key] ?? '-'),
    );
  return h(
    'section',
    { class: 'retries' },
    h('h2', {}, 'Retried turns'),
    view.retries.map((r) =>
      h(
        'article',
        { class: 'retry', dataset: { turn: r.turn } },
        h(
          'h3',
          {},
          `turn ${r.turn}: attempt ${r.failed.attempt} → ${r.completed.attempt}`,
          r.lost_ms !== null
            ? h('span', { class: 'muted' }, ` · ${seconds(r.lost_ms)} before the attempt that completed`)
            : null,
        ),
        h(
          'table',
          { class: 'diff' },
          h(
            'thead',
            {},
            h(
              'tr',
              {},
              h('th', {}, ''),
              h('th', {}, `attempt ${r.failed.attempt}`),
              h('th', {}, `attempt ${r.completed.attempt}`),
            ),
          ),
          h(
            'tbody',
            {},
            row('ended', 'outcome', r),
            row('worker', 'worker', r),
            row('engine', 'engine', r),
            row('weights', 'weight_version', r),
          ),
        ),
        r.failed.message ? h('pre', { class: 'failure', dataset: { field: 'failure' } }, r.failed.message) : null,
        h(
          'p',
          { class: 'hint' },
          r.changed.length ? `changed: ${r.changed.join(', ')}. ` : '',
          'The history keeps only the completing attempt’s start and result, and the failure before it.',
        ),
      ),
    ),
  );
}

function summary(view) {
  const a = view.audit;
  const s = view.sample;
  const r = view.row;
  return h(
    'p',
    { class: 'facts summary' },
    fact('status', a?.status ?? s?.status ?? '-', 'status'),
    (a?.truncated_reason ?? s?.truncated_reason)
      ? fact('truncated', a?.truncated_reason ?? s?.truncated_reason, 'truncated_reason')
      : null,
    fact('reward', num(a ? a.reward : (s?.reward ?? null)), 'reward'),
    fact('outcome', r?.outcome ?? '-', 'outcome'),
    fact('advantage', num(r?.advantage ?? null), 'advantage'),
    fact(
      'weights',
      a?.weight_version === null || a?.weight_version === undefined ? '-' : `v${a.weight_version}`,
      'episode_weight_version',
    ),
    fact('label', s?.label ?? '-', 'label'),
    fact('environment', a?.environment ?? s?.environment ?? '-', 'environment'),
    fact('prompt tokens', a?.prompt_len ?? s?.prompt_len ?? '-'),
    a ? fact('workflow', a.workflow_status, 'workflow_status') : null,
    view.timings?.total_ms !== null && view.timings ? fact('episode time', seconds(view.timings.total_ms)) : null,
  );
}

function invariants(a) {
  if (!a?.invariants) return null;
  const i = a.invariants;
  return h(
    'p',
    { class: i.ok ? 'muted' : 'error' },
    `invariants ${i.ok ? 'ok' : 'VIOLATED'}: response ${i.response_length}, loss mask ${i.loss_mask_length}, logprobs ${i.logprobs_length}, mask sum ${i.mask_sum}`,
    i.problems.length ? ` — ${i.problems.join('; ')}` : '',
  );
}

export async function renderEpisode(main, params, { signal, crumbs }) {
  const view = await api(apiPath('episode', { id: params.id ?? '' }), signal);
  const [step, prompt, sample] = view.episode_id.split('/').slice(-3);
  const runId = view.episode_id.split('/').slice(0, -3).join('/');
  setCrumbs(crumbs, [
    [runId, 'run', { id: runId }],
    [`step ${step}`, 'step', { run: runId, step }],
    [`prompt ${prompt}`, 'step', { run: runId, step, group: prompt }],
    [`sample ${sample}`],
  ]);
  fill(
    main,
    h('h1', {}, 'episode ', h('code', {}, view.episode_id), ' ', badge(view.audit?.status ?? view.sample?.status)),
    h(
      'p',
      { class: 'nav' },
      view.history_url
        ? h(
            'a',
            { href: view.history_url, target: '_blank', rel: 'noopener noreferrer', class: 'history-link' },
            'its history in the Temporal UI',
          )
        : 'no Temporal UI to link to',
      ' · ',
      link('its group', 'step', { run: runId, step, group: prompt }),
    ),
    summary(view),
    view.audit_note ? h('p', { class: 'warn' }, view.audit_note) : null,
    promptSection(view.prompt, view.sample?.images ? view.episode_id : null, view.sample?.images ?? 0),
    h(
      'section',
      { class: 'turns' },
      h('h2', {}, 'Turns'),
      view.audit
        ? view.audit.turns.map((t) =>
            auditedTurn(
              t,
              view.timings?.turns.find((x) => x.turn === t.turn),
            ),
          )
        : view.sample
          ? sampleTurns(view)
          : null,
    ),
    retriesSection(view),
    invariants(view.audit),
    h('section', { class: 'token-section' }, tokenSection(view)),
  );
}
