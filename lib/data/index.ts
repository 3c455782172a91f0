// The dataset side of tempo-rl: loaders, prompts, synthetic data, HF download, SFT export.
export { loadDataset, resolveSplitFiles, rowsFromRecords, type Split } from './load.js';
export { DatasetError, RawRow, type LoadedDataset, type PromptRow, type SkippedRow } from './rows.js';
export { readJsonl, readParquet } from './readers.js';
export { resolveImageUrls } from './prompt-images.js';
export {
  buildMessages,
  CALC_SCORE_TOOL,
  DEFAULT_SYSTEM_PROMPT,
  TOOL_INSTRUCTION,
  PLAIN_INSTRUCTION,
  type ChatMessage,
  type ContentPart,
  type BuildMessagesOptions,
  type BuiltPrompt,
} from './prompt.js';
export { syntheticProblems, writeSyntheticDataset, rasterize, simplifiedSqrt } from './synth.js';
export { GEO3K_REPO, hfResolveUrl, hfInfoUrl, parquetFilesOf, downloadHfParquet } from './hf.js';
export { sftRecord, sftAnswer, writeSftJsonl } from './sft.js';
