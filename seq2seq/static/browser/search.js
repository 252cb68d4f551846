// Greedy and beam search of one sentence over a release's encoder and step graphs: the lite
// translator's numpy search (lite/seq2seq_lite/search.py) step for step, with its float32
// sums rounded as numpy rounds them (Math.fround), so that both choose the same words.
//
// The host-side rules below (lengthPenalty, maxLength, minLength, eosBanned, ngramBans) are those of
// lite/seq2seq_lite/rules.py, which every Python search follows; tests/test_rules.py holds these
// to them.

const f32 = Math.fround;

// GNMT's ((5 + length) / 6) ** alpha, dividing a log-prob sum; length counts the EOS.
export function lengthPenalty(length, alpha) {
  return Math.pow((5 + length) / 6, alpha);
}

// Target tokens before EOS is forced: floor(a * srcLength + b), at least 0 (srcLength counts
// the source EOS).
export function maxLength(srcLength, a, b) {
  return Math.max(Math.floor(srcLength * a + b), 0);
}

// Target tokens before EOS is allowed: floor(srcLength * a + b), at least 0 and at most the
// maximum length (where they meet, the maximum wins).
export function minLength(srcLength, a, b, maxLen) {
  return Math.min(Math.max(Math.floor(srcLength * a + b), 0), maxLen);
}

// The tokens that would complete an n-gram already in ``tokens`` (a hypothesis's pieces so
// far): banned at the next step, so that no n-gram occurs twice (n 0: none).
export function ngramBans(tokens, n) {
  const banned = new Set();
  if (n <= 0 || tokens.length < n) return banned;
  const last = tokens.length - n + 1; // where the n - 1 last tokens start
  for (let i = 0; i + n <= tokens.length; i++) {
    let same = true;
    for (let j = 0; j < n - 1 && same; j++) same = tokens[i + j] === tokens[last + j];
    if (same) banned.add(tokens[i + n - 1]);
  }
  return banned;
}

// The user's bans at step t on log-probs [rows * V]: EOS before minLen, and in each row every
// token that ngramBans names for its history (histories[row]).
export function steer(logProbs, vocab, histories, t, minLen, n, ids) {
  for (let row = 0; row * vocab < logProbs.length; row++) {
    if (t < minLen) logProbs[row * vocab + ids.eos] = -Infinity;
    for (const token of ngramBans(histories[row], n)) logProbs[row * vocab + token] = -Infinity;
  }
  return logProbs;
}

// The search's bans of ``cfg`` for a source of srcLength pieces (settings absent, as in releases
// made before them: off).
function userBans(cfg, srcLength, maxLen) {
  const minLen = minLength(srcLength, cfg.min_len_a ?? 0, cfg.min_len_b ?? 0, maxLen);
  return { minLen, n: cfg.no_repeat_ngram ?? 0 };
}

// A prefix's step t: every row keeps only the prefix's token, with the log-prob ``kept[row]`` it
// had before the bans (the prefix is the user's, not the search's).
export function keepOnly(logProbs, vocab, token, kept) {
  for (let row = 0; row * vocab < logProbs.length; row++) {
    logProbs.fill(-Infinity, row * vocab, (row + 1) * vocab);
    logProbs[row * vocab + token] = kept[row];
  }
  return logProbs;
}

// The log-probs of ``token`` in each row.
function column(logProbs, vocab, token) {
  const out = [];
  for (let row = 0; row * vocab < logProbs.length; row++) out.push(logProbs[row * vocab + token]);
  return out;
}

// The length limit, raised so that a prefix of ``forced`` pieces fits with one token more.
export function forcedLimit(limit, forced) {
  return forced > 0 ? Math.max(limit, forced + 1) : limit;
}

// Restrict, steer and force step t's log-probs [rows * V], in the order every search does.
function rules(out, vocab, histories, t, limit, minLen, n, prefix, ids) {
  const restricted = restrict(out.logProbs, vocab, t === limit, ids, t === 0);
  const kept = t < prefix.length ? column(restricted, vocab, prefix[t]) : null;
  const logProbs = steer(restricted, vocab, histories, t, minLen, n, ids);
  return kept ? keepOnly(logProbs, vocab, prefix[t], kept) : logProbs;
}

// rules.settled: the nbest-th finished score (-Infinity: not yet) at least the best live score
// over the largest length penalty it can still get (float32, as the numpy search divides)
export function settled(kept, bestLive, bestPenalty) {
  return kept > -Infinity && kept >= f32(bestLive / bestPenalty);
}

// Whether EOS is forbidden: at the first step unless at the length limit (no empty output).
export function eosBanned(first, atLimit) {
  return first && !atLimit;
}

// Forbid PAD and BOS in every row of log-probs [rows * V], EOS where eosBanned says, and
// anything but EOS at the limit.
export function restrict(logProbs, vocab, atLimit, ids, first) {
  for (let start = 0; start < logProbs.length; start += vocab) {
    if (eosBanned(first, atLimit)) logProbs[start + ids.eos] = -Infinity;
    if (atLimit) {
      const eos = logProbs[start + ids.eos];
      logProbs.fill(-Infinity, start, start + vocab);
      logProbs[start + ids.eos] = eos;
    }
    logProbs[start + ids.pad] = -Infinity;
    logProbs[start + ids.bos] = -Infinity;
  }
  return logProbs;
}

// The attention of each row [rows][S]: the mean over heads of weights [rows, heads, S].
function meanOverHeads(weights, rows, heads) {
  const width = weights.length / (rows * heads);
  const out = [];
  for (let r = 0; r < rows; r++) {
    const row = new Float32Array(width);
    for (let h = 0; h < heads; h++) {
      const at = (r * heads + h) * width;
      for (let j = 0; j < width; j++) row[j] = f32(row[j] + weights[at + j]);
    }
    if (heads > 1) for (let j = 0; j < width; j++) row[j] = f32(row[j] / heads);
    out.push(row);
  }
  return out;
}

// Indices of the ``count`` largest values, largest first (ties: the lower index first).
function top(values, count) {
  const best = [];
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (best.length === count && !(v > values[best[count - 1]])) continue;
    let at = best.length === count ? count - 1 : best.length;
    while (at > 0 && v > values[best[at - 1]]) at--;
    best.splice(at, 0, i);
    if (best.length > count) best.pop();
  }
  return best;
}

// The most probable token at every step.
export async function greedy(graphs, src, cfg) {
  const ids = graphs.ids;
  const prefix = cfg.prefix ?? []; // target ids the output starts with
  let { memory, state } = await graphs.encode(src);
  const limit = forcedLimit(maxLength(src.length, cfg.max_len_a, cfg.max_len_b), prefix.length);
  const { minLen, n } = userBans(cfg, src.length, limit);
  const tokens = [];
  const attention = [];
  let score = 0;
  let prev = ids.bos;
  for (let t = 0; t <= limit; t++) {
    const out = await graphs.step([prev], state, memory);
    const vocab = out.logProbs.length;
    const logProbs = rules(out, vocab, [tokens], t, limit, minLen, n, prefix, ids);
    let token = 0;
    for (let v = 1; v < logProbs.length; v++) if (logProbs[v] > logProbs[token]) token = v;
    tokens.push(token);
    attention.push(meanOverHeads(out.weights, 1, graphs.heads)[0]);
    score = f32(score + logProbs[token]);
    state = out.state;
    prev = token;
    if (token === ids.eos) break;
  }
  return [{ tokens: tokens.slice(0, -1), score: score / lengthPenalty(tokens.length, cfg.alpha), attention }];
}

// The k best continuations at every step; EOS among the k best candidates finishes a
// hypothesis; done with k of them, at the length limit, or when no live beam can end above the
// n-best-th finished score. Returns the n-best list, best first.
export async function beam(graphs, src, cfg) {
  const ids = graphs.ids;
  const k = cfg.beam_size;
  const nbest = Math.min(cfg.nbest, k);
  const prefix = cfg.prefix ?? []; // target ids every output starts with
  const limit = forcedLimit(maxLength(src.length, cfg.max_len_a, cfg.max_len_b), prefix.length);
  const bestPenalty = f32(lengthPenalty(limit + 1, cfg.alpha));
  const { minLen, n } = userBans(cfg, src.length, limit);
  let seqs = [[]]; // each row's tokens so far
  let { memory, state } = await graphs.encode(src);
  let scores = [0];
  let prev = [ids.bos];
  const parents = [];
  const fed = [];
  const history = [];
  const ended = []; // {score, step, row}, at most k
  for (let t = 0; t <= limit; t++) {
    const width = scores.length;
    const out = await graphs.step(prev, state, memory);
    history.push(meanOverHeads(out.weights, width, graphs.heads));
    const vocab = out.logProbs.length / width;
    const logProbs = rules(out, vocab, seqs, t, limit, minLen, n, prefix, ids);
    const candidates = new Float32Array(logProbs.length);
    for (let i = 0; i < logProbs.length; i++) candidates[i] = f32(scores[Math.floor(i / vocab)] + logProbs[i]);
    const slots = top(candidates, 2 * k).map((i) => ({
      score: candidates[i],
      token: i % vocab,
      row: Math.floor(i / vocab),
    }));
    const penalty = f32(lengthPenalty(t + 1, cfg.alpha));
    slots.forEach((slot, s) => {
      const ends = slot.token === ids.eos && s < k && Number.isFinite(slot.score);
      if (ends && ended.length < k) ended.push({ score: f32(slot.score / penalty), step: t, row: slot.row });
    });
    const next = [...slots.filter((s) => s.token !== ids.eos), ...slots.filter((s) => s.token === ids.eos)].slice(0, k);
    const finished = ended.map((e) => e.score).sort((a, b) => b - a);
    const kept = finished.length >= nbest ? finished[nbest - 1] : -Infinity;
    const done = t === limit || ended.length >= k || settled(kept, next[0].score, bestPenalty);
    const rows = next.map((s) => s.row);
    parents.push(rows);
    fed.push(next.map((s) => s.token));
    if (done) break;
    memory = width === k ? memory : graphs.rows(memory, rows);
    state = graphs.rows(out.state, rows);
    scores = next.map((s) => s.score);
    seqs = next.map((s) => [...seqs[s.row], s.token]);
    prev = next.map((s) => s.token);
  }
  const order = ended.map((e, i) => i).sort((i, j) => (ended[i].score > ended[j].score ? -1 : ended[i].score < ended[j].score ? 1 : 0));
  return order.slice(0, nbest).map((i) => backtrack(ended[i], fed, parents, history));
}

// The tokens and attention of the hypothesis whose EOS is row ``row`` of step ``step``.
function backtrack({ score, step, row }, fed, parents, history) {
  const tokens = [];
  const attention = [history[step][row]];
  for (let t = step - 1; t >= 0; t--) {
    tokens.push(fed[t][row]);
    row = parents[t][row];
    attention.push(history[t][row]);
  }
  return { tokens: tokens.reverse(), score, attention: attention.reverse() };
}
