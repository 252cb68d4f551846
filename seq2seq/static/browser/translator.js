// The release's model in the browser: its ONNX graphs on onnxruntime-web (WebAssembly, one
// thread), its sentencepiece models through @sctg/sentencepiece-js (Google's sentencepiece
// compiled to WebAssembly: the same normalisation and segmentation as the Python package), and
// the search of search.js. It answers the page's POST "translate" as seq2seq-serve does, so the
// page is the served page; window.seq2seq.translate(lines, options) is the same from a script.

import * as ort from "./ort.wasm.min.mjs";
import { SentencePieceProcessor } from "./sentencepiece.js";
import { beam, greedy } from "./search.js";

ort.env.wasm.numThreads = 1; // threads need a cross-origin-isolated page; a static host is not
ort.env.wasm.wasmPaths = new URL("./", import.meta.url).href;

// The encoder and step graphs as two calls, fields by the names onnx/graphs.json gives.
class Graphs {
  static async load(spec) {
    const graphs = new Graphs();
    const files = spec.files.fp32;
    graphs.encoder = await ort.InferenceSession.create(`onnx/${files.encoder}`);
    graphs.decoder = await ort.InferenceSession.create(`onnx/${files.step}`);
    graphs.spec = spec;
    graphs.ids = spec.ids;
    graphs.heads = spec.heads;
    return graphs;
  }

  async encode(src) {
    const ids = BigInt64Array.from(src.map((i) => BigInt(i)));
    const out = await this.encoder.run({ src: new ort.Tensor("int64", ids, [1, src.length]) });
    const pick = (names) => Object.fromEntries(names.map((n) => [n, out[n]]));
    return { memory: pick(this.spec.memory), state: pick(this.spec.state) };
  }

  async step(prev, state, memory) {
    const tokens = new ort.Tensor("int64", BigInt64Array.from(prev.map((i) => BigInt(i))), [prev.length]);
    const out = await this.decoder.run({ prev_tokens: tokens, ...state, ...memory });
    const names = this.decoder.outputNames;
    const next = Object.fromEntries(this.spec.state.map((n, i) => [n, out[names[i + 1]]]));
    return { logProbs: out[names[0]].data, state: next, weights: out[names[names.length - 1]].data };
  }

  // The rows ``rows`` of every batched field (a 0-d field is shared).
  rows(fields, rows) {
    const picked = {};
    for (const [name, tensor] of Object.entries(fields)) {
      if (tensor.dims.length === 0) {
        picked[name] = tensor;
        continue;
      }
      const size = tensor.data.length / tensor.dims[0];
      const data = new tensor.data.constructor(rows.length * size);
      rows.forEach((r, i) => data.set(tensor.data.subarray(r * size, (r + 1) * size), i * size));
      picked[name] = new ort.Tensor(tensor.type, data, [rows.length, ...tensor.dims.slice(1)]);
    }
    return picked;
  }
}

async function tokenizer(url) {
  const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
  const processor = new SentencePieceProcessor();
  await processor._loadModel(bytes); // the bytes as they are: no Node Buffer in a browser
  return processor;
}

const round = (x) => Math.round(x * 1e4) / 1e4;

class Translator {
  static async load() {
    const t = new Translator();
    t.spec = await (await fetch("onnx/graphs.json")).json();
    t.vocab = await (await fetch("vocab.json")).json();
    t.card = (await (await fetch("models")).json()).models[0];
    [t.graphs, t.src, t.tgt] = await Promise.all([
      Graphs.load(t.spec),
      tokenizer(t.spec.src_tokenizer),
      tokenizer(t.spec.tgt_tokenizer),
    ]);
    return t;
  }

  text(tokens) {
    return tokens.length ? this.tgt.decodeIds(tokens).split(/\s+/).filter(Boolean).join(" ") : "";
  }

  // One sentence (the ``index``-th): {translation, nbest (with nbest > 1), alignment}, as
  // seq2seq-serve answers; its output starts with ``prefix`` (text; "" or null: none).
  async one(line, options, prefix, index = 0) {
    const search = { ...this.spec.search, ...options };
    if (prefix && prefix.trim()) search.prefix = this.tgt.encodeIds(prefix.trim());
    const pieces = this.src.encodeIds(line.trim());
    if (pieces.length > search.max_source_len) {
      const count = (n) => n.toLocaleString("en-US");
      throw new TooLong(
        `sentence ${index} has ${count(pieces.length)} subwords; at most ${count(search.max_source_len)} are translated (max_source_len=...)`,
      );
    }
    const empty = { translation: "", alignment: { source: [], target: [], weights: [] } };
    if (!pieces.length) return search.nbest > 1 ? { ...empty, nbest: [] } : empty;
    const source = [...pieces, this.spec.ids.eos];
    const found = await (search.beam_size === 1 ? greedy : beam)(this.graphs, source, search);
    const best = found[0];
    const item = { translation: this.text(best.tokens) };
    if (search.nbest > 1) item.nbest = found.map((h) => ({ translation: this.text(h.tokens), score: round(h.score) }));
    item.alignment = {
      source: source.map((i) => this.vocab.src[i]),
      target: [...best.tokens, this.spec.ids.eos].map((i) => this.vocab.tgt[i]),
      weights: best.attention.map((row) => Array.from(row, round)),
    };
    return item;
  }

  async translate(lines, options = {}, prefixes = null) {
    const out = [];
    for (const [i, line] of lines.entries()) out.push(await this.one(line, options, prefixes?.[i], i));
    return out;
  }

  // The page's POST "translate", answered as seq2seq-serve answers it: 400 for a body that is
  // not JSON, 422 for a query it cannot take, 413 for a sentence over max_source_len, 500 when
  // the model fails; alignments only when asked for, nbest the export's (capped by the beam).
  async answer(body) {
    let query;
    try {
      query = JSON.parse(body);
    } catch (e) {
      return refused(400, `the body is not JSON: ${e.message}`);
    }
    const problem = this.problem(query);
    if (problem) return refused(422, problem);
    const sentences = Array.isArray(query) ? query : query.sentences;
    const options = this.options(Array.isArray(query) ? {} : query);
    try {
      const translations = await this.translate(sentences, options, query.prefixes);
      if (query.alignment !== true) for (const item of translations) delete item.alignment;
      return Response.json({ model: this.card.name, translations });
    } catch (e) {
      return refused(e instanceof TooLong ? 413 : 500, String(e.message || e));
    }
  }

  // The search of a query: its beam_size and nbest, or the export's.
  options(query) {
    const beam_size = query.beam_size ?? this.spec.search.beam_size;
    return { beam_size, nbest: query.nbest ?? Math.min(this.spec.search.nbest ?? 1, beam_size) };
  }

  // Why a parsed query cannot be answered here, in the server's words; null when it can.
  problem(query) {
    const sentences = Array.isArray(query) ? query : query?.sentences;
    if (!Array.isArray(sentences) || !sentences.every((s) => typeof s === "string")) {
      return 'send a JSON list of sentences (strings), or {"sentences": [...]}';
    }
    if (!sentences.length) return "no sentences";
    if (Array.isArray(query)) return null;
    const unknown = Object.keys(query).filter((k) => !FIELDS.has(k)).sort();
    if (unknown.length) return `unknown fields: ${unknown.join(", ")}; the fields are ${[...FIELDS].sort().join(", ")}`;
    if (query.alignment !== undefined && typeof query.alignment !== "boolean") return "alignment must be true or false";
    if (query.constraints) return "constraints are for seq2seq-serve: not in the browser yet";
    const { beam_size, nbest } = this.options(query);
    const whole = (n, top) => Number.isInteger(n) && n >= 1 && n <= top;
    if (!whole(beam_size, Infinity)) return "beam_size must be a whole number from 1";
    if (!whole(nbest, beam_size)) return `nbest must be a whole number from 1 to ${beam_size}`;
    const prefixes = query.prefixes;
    const fits = (p) => p === null || typeof p === "string";
    if (prefixes != null && !(Array.isArray(prefixes) && prefixes.length === sentences.length && prefixes.every(fits))) {
      return `prefixes must be a list of ${sentences.length} strings (or null), one a sentence`;
    }
    return null;
  }
}

class TooLong extends Error {}

// what a query may hold: the server's fields (one model here, so "model" is read as any)
const FIELDS = new Set(["sentences", "beam_size", "nbest", "alignment", "model", "prefixes", "constraints"]);

const refused = (status, error) => Response.json({ error }, { status });

// index.html made window.seq2seq a promise before this module ran; it resolves here
Translator.load().then((translator) => {
  window.seq2seqLoaded.resolve(translator);
  document.body.classList.add("ready");
}, (e) => {
  window.seq2seqLoaded.reject(e);
  document.getElementById("error").textContent = `the model did not load: ${e.message || e}`;
});
