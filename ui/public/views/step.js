// A step: its GRPO groups side by side (group = run/step/prompt), each sample's reward, advantage,
// length, turns, first answer, status and outcome; how many episodes were trained, filtered or failed.
import { api, apiPath, badge, fill, h, link, num, table } from '../dom.js';
import { setCrumbs } from './common.js';

function sampleRow(r) {
  return h(
    'tr',
    { class: `outcome-${r.outcome}`, dataset: { episode: r.episode_id } },
    h('td', {}, link(`sample ${r.sample_index}`, 'episode', { id: r.episode_id }, { class: 'episode-link' })),
    h('td', { class: 'n' }, num(r.reward)),
    h('td', { class: 'n' }, num(r.advantage)),
    h('td', { class: 'n' }, r.response_len ?? '-'),
    h('td', { class: 'n' }, r.turns ?? '-'),
    h('td', { class: 'answer' }, r.answers[0] ?? '-'),
    h('td', {}, badge(r.status), r.truncated_reason ? h('span', { class: 'muted' }, ` ${r.truncated_reason}`) : null),
    h('td', {}, r.outcome),
  );
}

function groupCard(view, g) {
  const spread =
    g.mean_reward === null
      ? ''
      : ` · mean ${num(g.mean_reward)}${g.std_reward !== null ? ` ± ${num(g.std_reward)}` : ''}`;
  return h(
    'article',
    { class: 'group', dataset: { group: g.group_id } },
    h(
      'h3',
      {},
      link(
        `prompt ${g.prompt_index}`,
        'step',
        { run: view.run_id, step: view.step, group: g.prompt_index },
        { class: 'group-link' },
      ),
      h('span', { class: 'muted' }, ` · label `, h('code', {}, g.label ?? '-'), spread),
    ),
    table(
      ['sample', 'reward', 'advantage', 'tokens', 'turns', 'first answer', 'status', 'outcome'],
      g.rows.map(sampleRow),
    ),
  );
}

function stepNav(view) {
  const i = view.steps.indexOf(view.step);
  const prev = i > 0 ? view.steps[i - 1] : null;
  const next = i >= 0 && i < view.steps.length - 1 ? view.steps[i + 1] : null;
  return h(
    'p',
    { class: 'nav' },
    prev !== null ? link(`← step ${prev}`, 'step', { run: view.run_id, step: prev }) : null,
    ' ',
    next !== null ? link(`step ${next} →`, 'step', { run: view.run_id, step: next }) : null,
    ' · ',
    link('search this step', 'search', { run: view.run_id, step: view.step }),
  );
}

export async function renderStep(main, params, { signal, crumbs }) {
  const runId = params.run ?? '';
  const view = await api(
    apiPath(`runs/${encodeURIComponent(runId)}/steps/${encodeURIComponent(params.step ?? '')}`),
    signal,
  );
  const focus = params.group === undefined ? null : Number(params.group);
  setCrumbs(crumbs, [
    [runId, 'run', { id: runId }],
    [`step ${view.step}`, focus === null ? null : 'step', { run: runId, step: view.step }],
    ...(focus === null ? [] : [[`prompt ${focus}`]]),
  ]);
  const c = view.counts;
  const summary = h(
    'p',
    { class: 'counts' },
    `${c.episodes} episodes: `,
    h('strong', { dataset: { count: 'trained' } }, c.trained),
    ' trained, ',
    h('strong', { dataset: { count: 'filtered' } }, c.filtered),
    ' filtered (all-equal group), ',
    h('strong', { dataset: { count: 'failed' } }, c.failed),
    ' failed',
    c.pending ? [', ', h('strong', {}, c.pending), ' not recorded yet (the step is running)'] : null,
    view.weight_version !== null ? ` · trained into weights v${view.weight_version}` : '',
    view.metrics['rollout/raw_reward'] !== undefined ? ` · mean reward ${num(view.metrics['rollout/raw_reward'])}` : '',
  );
  const groups = focus === null ? view.groups : view.groups.filter((g) => g.prompt_index === focus);
  fill(
    main,
    h('h1', {}, `${runId} · step ${view.step}`),
    stepNav(view),
    summary,
    view.sft_records ? h('p', { class: 'muted' }, `An SFT step: ${view.sft_records} records, no GRPO groups.`) : null,
    h(
      'p',
      { class: 'hint' },
      view.dr_grpo
        ? 'Advantage (Dr. GRPO): reward − group mean, over the trained samples of the group, as the trainer computes it.'
        : 'Advantage: (reward − group mean) / (group std + 1e-6), over the trained samples of the group, as the trainer computes it.',
    ),
    h(
      'div',
      { class: focus === null ? 'groups' : 'groups focused' },
      groups.map((g) => groupCard(view, g)),
    ),
  );
}
