// Image parts of a prompt as an OpenAI-compatible engine accepts them: data: URLs, not blob refs.
// Apart from prompt.ts so that building a prompt does not load the image stack (sharp).
import type { BlobStore } from '../../stores/blobstore.js';
import { imageDataUrl } from '../images.js';
import type { ChatMessage, ContentPart } from './prompt.js';

/** Replaces blob refs in image parts by data: URLs (what an OpenAI-compatible engine accepts). */
export async function resolveImageUrls(messages: ChatMessage[], store: BlobStore): Promise<ChatMessage[]> {
  return Promise.all(
    messages.map(async (m) => {
      if (typeof m.content === 'string' || m.content === null) return m;
      const content = await Promise.all(
        m.content.map(
          async (part): Promise<ContentPart> =>
            part.type === 'image_url' && part.image_url.url.startsWith('blob:')
              ? { type: 'image_url', image_url: { url: await imageDataUrl(store, part.image_url.url) } }
              : part,
        ),
      );
      return { ...m, content };
    }),
  );
}
