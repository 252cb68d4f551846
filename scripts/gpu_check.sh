#!/usr/bin/env bash
# The GPU checks in one command, for a machine with a CUDA torch and no network. Here, first:
#
#   bash ../shared/gpu/bundle.sh                    # wheels and the Multi30k mirror: .gpu-bundle/
#   bash scripts/gpu_peer_bundle.sh                 # optional: OpenNMT-py for the side-by-side
#   cp -r ../shared/data/alignment .gpu-bundle/     # optional: the Hansards gold, for compare
#
# then, on the GPU machine, from the project root:
#
#   bash scripts/gpu_check.sh OUT_DIR               # STEPS="machine tests peer ours recipe"
#   STEPS=compare bash scripts/gpu_check.sh OUT_DIR # English->French rows, a longer budget
#
# Every step runs under its own time limit (seconds: TESTS_S, PEER_S, OURS_S, RECIPE_S,
# COMPARE_S) even when an earlier one failed, cut to what is left of DEADLINE_S (570: one call
# of a lent machine runs 10 minutes at most) and skipped where under a minute is; each writes its
# log to OUT_DIR. Then the side-by-side table against the targets (scripts/gpu_table.py, also
# OUT_DIR/table.md), and a last line that says which steps failed or were skipped. A rerun on the
# same machine starts clean: a fresh install, fresh run folders. COMMIT=<hash> names the code
# where the copy has no .git. On an H200 (2026-11-30) peer took 89 s, ours 337 s, tests 140 s and
# recipe 80 s a seed, the machine's start 34 s. A 15-minute lease, start-up included, holds about
# 14 minutes of steps: run STEPS="machine peer ours", then at once on the still warm machine
# STEPS="tests recipe" with DEADLINE_S set to the device time left less 30 s (a call ends at
# whichever comes first), and RECIPE_SEEDS=2 (the second seed alone) where less than 5 minutes
# are left by then.
set -uo pipefail
out=${1:-gpu-check}
mkdir -p "$out"
steps=${STEPS:-machine tests peer ours recipe}
bundle=${BUNDLE:-.gpu-bundle}
export PYTHONUNBUFFERED=1 SEQ2SEQ_MULTI30K=$bundle/multi30k
deadline=${DEADLINE_S:-570}
failed=()
step() { # name seconds command...: one step, its output in $out/name.log
  local name=$1 limit=$2; shift 2
  case " $steps " in *" $name "*) ;; *) return 0 ;; esac
  local left=$((deadline - SECONDS - 20)) # 20 s kept for the table
  if [ "$left" -lt 60 ]; then echo "== $name skipped: ${left}s left"; failed+=("$name(skipped)"); return 0; fi
  [ "$limit" -le "$left" ] || limit=$left
  echo "== $name (at most ${limit}s) $(date -u +%H:%M:%S)"
  if ! timeout "$limit" bash -c "$*" >"$out/$name.log" 2>&1; then failed+=("$name"); fi
  tail -n 25 "$out/$name.log"
}
# inside a step: one command whose failure does not stop the step. Its lines matching SHOW are
# printed (its last 20 when it fails), its whole output added to $out/parts.log; the step fails at
# its end if any part did
part() {
  local show=$1 start=$SECONDS; shift
  echo "-- $*" >>"$out/parts.log"
  if "$@" >"$out/part.out" 2>&1; then grep -E -- "$show" "$out/part.out" | tail -n 8
  else echo "FAILED: ${*:1:6} ..."; tail -n 20 "$out/part.out"; touch "$out/part.failed"; fi
  echo "   ($((SECONDS - start)) s)"
  cat "$out/part.out" >>"$out/parts.log"
}
export -f part; export out

site=/tmp/seq2seq-site
rm -rf "$site" # a rerun installs this checkout, not what an earlier call left
python3 -m pip install -q --no-index --no-deps --no-build-isolation --target "$site" \
  . ./lite "$bundle"/whl/*.whl || { echo "install failed"; exit 2; }
export PYTHONPATH=$site PATH=$site/bin:$PATH
# the installed package, not the checkout's seq2seq/ (which lacks seq2seq.configs): no cwd on sys.path
export PYTHONSAFEPATH=1

step machine 60 'nvidia-smi; python3 -c "import torch, seq2seq; print(torch.__version__, \
torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.is_bf16_supported(), seq2seq.__file__)"; \
lscpu | head -20'

# -n0: in this process, all cores for it (xdist's workers would each get one thread)
step tests "${TESTS_S:-300}" python3 -m pytest -n0 -m gpu -q -p no:cacheprovider --durations=8 \
  tests/test_gpu.py

# OpenNMT-py 3.5.1 on this GPU: the CPU side-by-side's model and batches (../shared/peers/opennmt)
peer=$bundle/peer
step peer "${PEER_S:-150}" "
  set -e; export PYTHONPATH=/tmp/peer-site:$peer/stub
  rm -rf /tmp/peer-site
  python3 -m pip install -q --no-index --no-deps --target /tmp/peer-site $peer/whl/*.whl
  w=/tmp/peer-work; d=/tmp/peer-data; rm -rf \$w; mkdir -p \$w
  python3 $peer/prep_data.py $bundle/multi30k \$d >/dev/null
  python3 $peer/yaml_set.py $peer/config.yaml \$w/train.yaml save_data=\$w/run \
    src_vocab=\$w/vocab.de tgt_vocab=\$w/vocab.en save_model=\$w/model \
    data.corpus_1.path_src=\$d/pieces/train.de data.corpus_1.path_tgt=\$d/pieces/train.en \
    data.valid.path_src=\$d/pieces/val.de data.valid.path_tgt=\$d/pieces/val.en \
    train_steps=300 save_checkpoint_steps=300 'gpu_ranks=[0]'
  python3 -m onmt.bin.build_vocab -config \$w/train.yaml -n_sample -1 >\$w/vocab.out 2>&1
  python3 $peer/timev.py \$w/train.time python3 -m onmt.bin.train -config \$w/train.yaml \
    >\$w/train.out 2>&1 || { tail -30 \$w/train.out; exit 1; }
  export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1
  for spec in beam5:5 greedy:1; do
    name=\${spec%%:*}; beam=\${spec##*:}
    python3 $peer/timev.py \$w/decode_\$name.time python3 -m onmt.bin.translate \
      -model \$w/model_step_300.pt -src \$d/pieces/test_2016_flickr.de \
      -output \$w/hyp_\$name.test -beam_size \$beam -batch_size 64 -batch_type sents \
      -max_length 250 -max_length_ratio 1.5 -length_penalty wu -alpha 1.0 -report_time -gpu 0 \
      >\$w/decode_\$name.out 2>&1 || { tail -30 \$w/decode_\$name.out; exit 1; }
    python3 -c \"import sentencepiece as s; p = s.SentencePieceProcessor(model_file='\$d/spm/en.model')
open('\$w/hyp_\$name.test.detok', 'w').writelines(p.decode(l.split()) + '\n' for l in open('\$w/hyp_\$name.test'))\"
  done
  python3 $peer/summarize.py \$w \$d
  [ ! -e \$w/summary.json ] || cp \$w/summary.json $out/peer.json
  # its large-batch setting (batch_type tokens, batch_size 8192), 100 updates, side by side
  b=\$w/big; mkdir -p \$b
  python3 $peer/yaml_set.py \$w/train.yaml \$b/train.yaml batch_type=tokens batch_size=8192 \
    train_steps=100 save_checkpoint_steps=100 report_every=10 save_model=\$b/model
  python3 $peer/timev.py \$b/train.time python3 -m onmt.bin.train -config \$b/train.yaml \
    >\$b/train.out 2>&1 || { tail -30 \$b/train.out; exit 1; }
  echo 'large batches (8192 tokens):'
  python3 $peer/summarize.py \$b \$d 2>&1 | grep -E '\"steady|logged|^ +[0-9.]+,?\$|peer='
  [ ! -e \$b/summary.json ] || cp \$b/summary.json $out/peer_8192.json"

# ours, the same shape and budget (graphed, as train.cuda_graphs=auto takes on CUDA; eager too
# with OURS_EAGER=1, about 40 s more), then the benchmark: the peer shape eager and graphed at its
# batch and at 8,192 tokens (and graphed in bf16 there), the reference model graphed at 2,000
# (the recipes' batch), 8,192 and 16,000 tokens in fp32 and bf16 (with peak memory: where bf16
# pays), the trained run's greedy and beam 5 in batches of 64 and of one sentence (latency); last,
# the graphed fp32 rows again in one process under the profiler (--profile): how busy the device
# kept, the top kernels
step ours "${OURS_S:-360}" "
  rm -f $out/part.failed; rm -rf /tmp/peer300 /tmp/peer300_eager
  peer='model.emb_size=256 model.encoder_size=256 model/attention=luong model.attention.score=concat
    train.max_steps=300 train.batch_tokens=1100 train.label_smoothing=0 device=cuda precision=fp32
    log.progress=false data.source=$bundle/multi30k'
  part 'tok/s|finished' python3 -m seq2seq.commands.train \$peer hydra.run.dir=/tmp/peer300
  cp /tmp/peer300/train.log $out/ours_train.log
  if [ -n \"${OURS_EAGER:-}\" ]; then
    part 'tok/s|finished' python3 -m seq2seq.commands.train \$peer train.cuda_graphs=false \
      hydra.run.dir=/tmp/peer300_eager
    cp /tmp/peer300_eager/train.log $out/ours_eager_train.log
  fi
  b='python3 scripts/benchmark.py --data-source $bundle/multi30k --device cuda --repeats 3'
  part '^[^{]' \$b --measure training --model peer --batch peer,8192 --precision fp32 \
    --cuda-graphs false,true
  part '^[^{]' \$b --measure training --model peer --batch 8192 --precision bf16 --cuda-graphs true
  part '^[^{]' \$b --measure training --model reference --attention bahdanau \
    --batch recipe,8192,16000 --precision fp32,bf16 --cuda-graphs true
  part '^[^{]' \$b --measure decoding --model peer --run-dir /tmp/peer300 --precision fp32,bf16 \
    --cuda-graphs false,true
  part '^[^{]' \$b --measure decoding --model peer --run-dir /tmp/peer300 --precision fp32 \
    --decode-batch 1 --test-limit 100 --repeats 2 --cuda-graphs false,true
  part 'device busy' \$b --measure training,decoding --model peer --batch peer,8192 \
    --run-dir /tmp/peer300 --precision fp32 --cuda-graphs true --repeats 1 --profile
  [ ! -e $out/part.failed ]"

# the best German->English recipe for the time given (validated at the end), one run per seed,
# then its test BLEU (best.pt, beam 5); RECIPE_OVERRIDES adds to it, e.g.
# "model/attention=bahdanau" (the default before issue 54 measured Luong first) or "precision=fp32"
# (auto takes bf16 for the graphed update since 2026-11-30)
step recipe "${RECIPE_S:-330}" "
  set -eo pipefail
  for seed in ${RECIPE_SEEDS:-1 2}; do
    rm -rf /tmp/recipe\$seed
    python3 -m seq2seq.commands.train experiment=multi30k_de_en device=cuda log.progress=false \
      data.source=$bundle/multi30k hydra.run.dir=/tmp/recipe\$seed train.seed=\$seed \
      train.max_minutes=${RECIPE_MINUTES:-1.5} ${RECIPE_OVERRIDES:-} 2>&1 | { grep -E 'finished|BLEU' || true; } | tail -2
    cp /tmp/recipe\$seed/train.log $out/recipe\${seed}_train.log
    python3 -m seq2seq.commands.evaluate run_dir=/tmp/recipe\$seed device=cuda | tail -1 \
      | tee $out/recipe\${seed}_eval.json
  done"

# the attention comparison's English->French rows side by side on the one GPU, to a longer budget
# (docs/attention.md, "Where the alignment ends"); each row's validations are in its train.log
step compare "${COMPARE_S:-300}" "
  set -e; d=/tmp/hansards_mix; w=/tmp/compare; rm -rf \$w; mkdir -p \$w
  python3 scripts/alignment_data.py --multi30k $bundle/multi30k \
    --pairs $bundle/alignment/en-fr.hansards.txt --out \$d >/dev/null
  for row in ${ROWS:-local_m luong bahdanau bahdanau_conditional multihead local_p}; do
    python3 -m seq2seq.commands.train experiment=attention_comparison_en_fr +compare=\$row train.seed=1 \
      train.max_steps=${COMPARE_STEPS:-3200} train.validate_every=400 device=cuda \
      train.threads=2 log.progress=false data.train=\$d/train data.valid=\$d/val \
      data.test=\$d/test_2016_flickr log.alignment_pairs=$bundle/alignment/en-fr.hansards.txt \
      log.alignment_links=$bundle/alignment/en-fr.hansards.talp hydra.run.dir=\$w/\$row \
      >\$w.\$row.out 2>&1 &
  done
  wait
  grep -H 'valid loss' \$w/*/train.log"

# the side-by-side table against the targets, from what the steps above left in $out
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
[ -z "$commit" ] || echo "$commit" >"$out/commit.txt" # none where the copy has no .git
python3 scripts/gpu_table.py "$out" | tee "$out/table.md"
echo "failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
