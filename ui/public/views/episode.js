// An episode: its image, then each turn (the model's text with its tool call picked out, the tool's
// feedback, finish reason, engine, weights, retries and their cause, times), and its tokens coloured
// by logprob with the loss mask. The turns are what `tempo-rl episodes show --json` prints (the
// response's `audit`), all of it put in as text.
import { apiPath, api, badge, fill, h, link, num, seconds } from '../dom.js';
import { setCrumbs } from './common.js';

const TOOL_CALL = /<tool_call>[\s\S]*?(?:<\/tool_call>|$)/g;

/** The turn's text with each tool call in its own element; textContent is the text unchanged. */
function turnText(text) {
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
  let at = 0;
  return view.sample.turns.map((t, i) => {
    const text = view.tokens
      .slice(at, at + t.generated_tokens)
      .map((tok) => tok[1])
      .join('');
    at += t.generated_tokens + t.observation_tokens;
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
        fact('generated', t.generated_tokens),
        t.tool_answer !== undefined ? fact('answer', t.tool_answer ?? '-') : null,
      ),
      turnText(text),
    );
  });
}

function lpClass(lp, mask) {
  if (mask === 0) return 'tok masked';
  if (lp >= -0.05) return 'tok lp0';
  if (lp >= -0.5) return 'tok lp1';
  if (lp >= -1.5) return 'tok lp2';
  if (lp >= -3) return 'tok lp3';
  return 'tok lp4';
}

/** Every response token coloured by its rollout logprob; mask-0 tokens (observations, synthetic EOS) grey. */
function tokenStrip(view) {
  if (!view.tokens.length) return h('p', { class: 'muted' }, 'No sample stored: no tokens.');
  const strip = h('div', { class: 'tokens' });
  let at = 0;
  view.sample.turns.forEach((t, i) => {
    for (const [label, n] of [
      [`turn ${turnNumber(view, i)}`, t.generated_tokens],
      ['feedback', t.observation_tokens],
    ]) {
      if (n === 0) continue;
      strip.append(h('span', { class: 'turn-mark' }, label));
      for (const [id, text, lp, mask] of view.tokens.slice(at, at + n))
        strip.append(
          h('span', { class: lpClass(lp, mask), title: `token ${id} · logprob ${num(lp, 4)} · mask ${mask}` }, text),
        );
      at += n;
    }
  });
  for (const [id, text, lp, mask] of view.tokens.slice(at))
    strip.append(
      h('span', { class: lpClass(lp, mask), title: `token ${id} · logprob ${num(lp, 4)} · mask ${mask}` }, text),
    );
  const legend = h(
    'p',
    { class: 'legend' },
    'logprob: ',
    ['≥ −0.05', '≥ −0.5', '≥ −1.5', '≥ −3', '< −3'].map((t, i) => h('span', { class: `tok lp${i}` }, t)),
    ' ',
    h('span', { class: 'tok masked' }, 'loss mask 0'),
  );
  return [legend, strip];
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
  const images = view.sample
    ? Array.from({ length: view.sample.images }, (_, i) =>
        h('img', {
          class: 'figure',
          src: apiPath('episode/image', { id: view.episode_id, index: i }),
          alt: `image ${i} of the episode`,
        }),
      )
    : [];
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
    images.length ? h('section', { class: 'images' }, images) : null,
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
    invariants(view.audit),
    h('section', {}, h('h2', {}, 'Tokens'), tokenStrip(view)),
  );
}
