"""IOT: instance-wise layer order (Zhu et al., ICLR 2021) on top of the LV-BERT supernet.

M candidate orders (architectures of the search space) share the supernet's per-slot weights; a light predictor
(mean input word embedding -> linear d x M) picks one order per input sequence. Training runs as a custom NNI
one-shot strategy (`IOTStrategy`) under `NasExperiment`; inference groups a batch by the chosen order.

Modules: orders (candidate orders), routing (predictor, losses, grouped routing, `IOTModel`), strategy (the NNI
strategy and its Lightning module), train / evaluate / rundir (the `lvbert iot` pipeline), cli.
"""
