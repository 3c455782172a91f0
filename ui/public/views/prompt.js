// A prompt as the model saw it: the chat template's messages, each with its role, an image part as the
// episode's image. A long message (a system prompt that lists the tools) is folded to its first lines,
// opened by a click: the episode's and group's own content stays in view.
import { apiPath, h } from '../dom.js';

/** A message longer than this many lines is folded. */
export const FOLD_LINES = 6;

function part(p, imageEpisode) {
  if (!('image' in p)) return h('pre', { class: 'text', dataset: { field: 'prompt-text' } }, p.text);
  return imageEpisode
    ? h('img', {
        class: 'figure',
        src: apiPath('episode/image', { id: imageEpisode, index: p.image }),
        alt: `image ${p.image} of the prompt (${p.tokens} tokens)`,
        title: `image ${p.image}: ${p.tokens} placeholder tokens`,
      })
    : h('span', { class: 'muted' }, `[image ${p.image}: ${p.tokens} tokens]`);
}

/** The message's parts, folded when it is all text and long: its first line shows, the rest opens. */
function body(m, imageEpisode) {
  const parts = m.parts.map((p) => part(p, imageEpisode));
  const text = m.parts.every((p) => 'text' in p) ? m.parts.map((p) => p.text).join('') : null;
  const lines = text === null ? 0 : text.trimEnd().split('\n').length;
  if (lines <= FOLD_LINES) return parts;
  const first = text.trim().split('\n')[0];
  return h(
    'details',
    { class: 'folded' },
    h('summary', {}, h('span', { class: 'first-line' }, first), h('span', { class: 'muted' }, ` · ${lines} lines`)),
    parts,
  );
}

/** The prompt's messages, each with its role; an image part shows the episode's image. */
export function promptSection(messages, imageEpisode, imageCount = 0) {
  if (!messages?.length)
    return h(
      'section',
      { class: 'prompt' },
      h('h2', {}, 'Prompt'),
      h('p', { class: 'muted' }, 'No sample stored: no prompt.'),
    );
  const placed = messages.flatMap((m) => m.parts.filter((p) => 'image' in p).map((p) => p.image));
  // images the prompt's tokens did not place (a template this page does not read): after it
  const unplaced = Array.from({ length: imageCount }, (_, i) => i).filter((i) => !placed.includes(i));
  return h(
    'section',
    { class: 'prompt' },
    h('h2', {}, 'Prompt'),
    messages.map((m) =>
      h(
        'div',
        { class: `message role-${m.role ?? 'none'}`, dataset: { role: m.role ?? '' } },
        h('span', { class: 'role' }, m.role ?? 'text'),
        m.parts.length === 0 ? h('span', { class: 'muted' }, ' (the model writes from here)') : null,
        body(m, imageEpisode),
      ),
    ),
    imageEpisode
      ? unplaced.map((i) =>
          h('img', {
            class: 'figure',
            src: apiPath('episode/image', { id: imageEpisode, index: i }),
            alt: `image ${i}`,
          }),
        )
      : null,
  );
}
