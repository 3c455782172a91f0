// A step: its GRPO groups side by side (group = run/step/prompt), each sample's reward, advantage,
// length, turns, first answer, status and outcome; how many episodes were trained, filtered or failed.
// One group (…&group=P): its prompt as the model saw it, with its figure, and its samples' completions
// side by side.
import { api, apiPath, badge, fill, h, link, num } from '../dom.js';
import { dataTable } from '../tables.js';
import { setCrumbs } from './common.js';
import { turnText } from './episode.js';
import { promptSection } from './prompt.js';

const SAMPLE_COLUMNS = [
  {
    key: 'sample_index',
    label: 'sample',
    value: (r) => r.sample_index,
    cell: (r) => link(`sample ${r.sample_index}`, 'episode', { id: r.episode_id }, { class: 'episode-link' }),
  },
  { key: 'reward', label: 'reward', value: (r) => r.reward, cell: (r) => num(r.reward), class: 'n', descFirst: true },
  { key: 'advantage', label: 'advantage', value: (r) => r.advantage, cell: (r) => num(r.advantage), class: 'n' },
  { key: 'response_len', label: 'tokens', value: (r) => r.response_len, class: 'n' },
  { key: 'turns', label: 'turns', value: (r) => r.turns, class: 'n' },
  { key: 'first_answer', label: 'first answer', value: (r) => r.answers[0] ?? null, class: 'answer' },
  {
    key: 'status',
    label: 'status',
    value: (r) => r.status,
    cell: (r) => [badge(r.status), r.truncated_reason ? h('span', { class: 'muted' }, ` ${r.truncated_reason}`) : null],
  },
  { key: 'outcome', label: 'outcome', value: (r) => r.outcome },
  { key: 'episode_id', label: 'episode', value: (r) => r.episode_id, cell: (r) => h('code', {}, r.episode_id) },
];

const sampleTable = (name, rows) =>
  dataTable({
    name,
    columns: SAMPLE_COLUMNS,
    rows,
    rowAttrs: (r) => ({ class: `outcome-${r.outcome}`, dataset: { episode: r.episode_id } }),
  });

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
    sampleTable(g.group_id.replaceAll('/', '-'), g.rows),
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
  const group =
    focus === null
      ? null
      : await api(apiPath(`runs/${encodeURIComponent(runId)}/steps/${view.step}/groups/${focus}`), signal);
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
    group ? groupDetail(group) : null,
  );
}

/** One completion: its sample's facts, then each turn's text and the feedback after it. */
function completion(c) {
  return h(
    'article',
    { class: `completion outcome-${c.outcome}`, dataset: { episode: c.episode_id } },
    h(
      'h3',
      {},
      link(`sample ${c.sample_index}`, 'episode', { id: c.episode_id }, { class: 'episode-link' }),
      ' ',
      badge(c.status),
    ),
    h(
      'p',
      { class: 'facts' },
      h(
        'span',
        { class: 'fact' },
        h('span', { class: 'k' }, 'reward '),
        h('strong', { dataset: { field: 'reward' } }, num(c.reward)),
      ),
      h('span', { class: 'fact' }, h('span', { class: 'k' }, 'advantage '), num(c.advantage)),
      h('span', { class: 'fact' }, h('span', { class: 'k' }, 'outcome '), c.outcome),
    ),
    c.completion.length
      ? c.completion.map((t, i) => [
          h('p', { class: 'turn-label' }, `turn ${i + 1}`),
          turnText(t.text),
          t.observation !== null
            ? h('pre', { class: 'observation-text', dataset: { field: 'observation' } }, t.observation)
            : null,
        ])
      : h('p', { class: 'muted' }, 'No sample stored.'),
  );
}

/** The group's prompt (system, user, figure) and its completions side by side. */
function groupDetail(g) {
  return [
    promptSection(g.prompt, g.image_episode, g.images),
    h(
      'section',
      { class: 'completions-section' },
      h(
        'h2',
        {},
        `Completions of prompt ${g.prompt_index}`,
        h('span', { class: 'muted' }, ` · label ${g.label ?? '-'}`),
      ),
      h('div', { class: 'completions' }, g.completions.map(completion)),
    ),
  ];
}
