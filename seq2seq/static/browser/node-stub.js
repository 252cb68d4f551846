// The sentencepiece build imports Node's "fs" and "buffer" modules, which it uses only under
// Node; index.html's import map points both here, so that it loads in a browser.
export const Buffer = undefined;
export default {};
