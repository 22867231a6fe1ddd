#!/bin/bash
# The runs behind docs/results/user-datasets/ (issue 38's done-when), as a user runs them:
#   bash docs/results/user-datasets/verify.sh DIR      (DIR: where datasets and runs go)
set -x
cd "$(dirname "$0")/../../.."
export DLSUITE_ENVS_DIR=${DLSUITE_ENVS_DIR:-$HOME/.cache/dlsuite/venvs}
U=${1:?give a directory for the datasets and runs}
D=$U/datasets
rm -rf $D $U/runs $U/dd; mkdir -p $D $U/runs
T=$(.venv/bin/python -c "from suite import envs; print(envs.ensure('tensorflow').python)")
M=$(.venv/bin/python -c "from suite import envs; print(envs.ensure('mxnet').python)")
.venv/bin/python -c "
from pathlib import Path
from tests.quirky import make_quirky_imagefolder
import json
q = make_quirky_imagefolder(Path('$D/imagenet-quirky/train'))
print(json.dumps({'images': len(q.images), 'corrupt': q.corrupt, 'quirks': q.quirks, 'stray': q.stray}))
c = make_quirky_imagefolder(Path('$D/clean-src'), classes=4, per_class=24, seed=3)
for rel in c.corrupt + c.stray: (c.root / rel).unlink()
" > $U/made.json
uptime
TF_CPP_MIN_LOG_LEVEL=2 PYTHONPATH=$PWD $T -m tests.user_formats tfrecord $D/clean-src $D/tfrecord 2>/dev/null | tail -1 > $U/tfrecord-written.json
PYTHONPATH=$PWD $M -m tests.user_formats im2rec $D/clean-src $D/im2rec | tail -1 > $U/im2rec-written.json
PYTHONPATH=$PWD .venv/bin/python -m tests.user_formats webdataset $D/clean-src $D/webdataset | tail -1 > $U/webdataset-written.json
run() { name=$1; shift; uptime > $U/runs/$name.load; /usr/bin/time -v .venv/bin/dlsuite run --out $U/runs/$name --data-dir $U/dd "$@" > $U/runs/$name.out 2> $U/runs/$name.err; echo "exit $?" >> $U/runs/$name.out; uptime >> $U/runs/$name.load; }
run quirky-quick --level training --benchmark loader --data $D/imagenet-quirky/train --framework pytorch --quick
run quirky-full --level training --benchmark loader --data $D/imagenet-quirky/train --framework pytorch
run quirky-no-benchmark --level training --data $D/imagenet-quirky/train --framework pytorch --quick
run tfrecord --level training --benchmark loader --data $D/tfrecord --framework tensorflow,pytorch --quick
run im2rec --level training --benchmark loader --data $D/im2rec --framework mxnet,pytorch --quick
run webdataset --level training --benchmark loader --data $D/webdataset --framework pytorch,tensorflow --quick
for d in imagenet-quirky/train tfrecord im2rec webdataset; do .venv/bin/dlsuite data info $D/$d --scan --json --data-dir $U/dd > $U/info-$(echo $d | tr / -).json 2>&1; done
uptime
echo ALLDONE
