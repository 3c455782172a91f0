// A synthetic problem and the SVG pieces its figures are drawn with (shared by every synthetic task).

export interface SyntheticProblem {
  id: string;
  problem: string;
  /** In the Geo3K label form: 5*sqrt(3), 25*pi, 60. */
  answer: string;
  svg: string;
  /** angle_facts: the figure's kind (an index of synth-angles.ts's kinds), the row's stratum for
   *  rollout.prompt_order stratified. Absent for the tasks whose rows have no strata. */
  stratum?: number;
}

const W = 320;
const H = 240;
export const svgDoc = (body: string) =>
  `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">` +
  `<rect width="100%" height="100%" fill="white"/>` +
  `<g stroke="black" stroke-width="2" fill="none">${body}</g></svg>`;
export const label = (x: number, y: number, text: string, color = 'black') =>
  `<text x="${x}" y="${y}" font-family="DejaVu Sans, Arial, sans-serif" font-size="16" fill="${color}" stroke="none">${text}</text>`;
