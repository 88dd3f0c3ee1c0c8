"""Fine-tuning and evaluation (`lvbert finetune`, `lvbert glue`): tasks, LV-BERT's recipe, metrics, reports."""
