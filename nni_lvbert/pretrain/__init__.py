"""`lvbert pretrain`: pre-train one fixed architecture with MLM or ELECTRA (+ ALBERT SOP), save it as a Hugging
Face model directory. Modules: data (ELECTRA masking, SOP swaps), objectives, metrics, module (LightningModule),
train (options + the run), hf_output (model directories), cli."""
