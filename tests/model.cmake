# trainer/model.c: the whole model's gradients, training, and the PyTorch cross-check.
sluice_test(test_model_grad SOURCES test_model_grad.c LABELS model)
