"""The one example layout every default follows: the quickstart's (`lvbert run --out runs/quickstart`).

`lvbert run` writes its stages into RUN/supernet, RUN/search and RUN/pretrain; each stage's own command defaults to
the same directory, so after `bash scripts/quickstart.sh` every later command (and the nnictl configs in
experiments/, whose trials run one folder down) finds what the quickstart wrote. The docs use these paths too.
"""
RUN = "runs/quickstart"
SUPERNET = f"{RUN}/supernet"
FEWSHOT = f"{RUN}/supernet-fewshot"
SEARCH = f"{RUN}/search"
SEARCH_NNICTL = f"{RUN}/search-nnictl"
IOT = f"{RUN}/iot"
PRETRAIN = f"{RUN}/pretrain"
FINETUNE = f"{RUN}/finetune"
GLUE = f"{RUN}/glue"
STUDY = "runs/study"
