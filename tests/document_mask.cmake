# training.document_mask end to end (tests/test_document_mask.sh): on the CPU, masking is a
# no-op when documents outlast the sequences, changes the losses on short documents, and
# `sluice eval --document-mask` reproduces the masked held-out loss; on the CUDA backend (label
# cuda: the emulated build in CI, or a GPU; skipped without one) it matches the CPU's losses.
foreach(mode cpu cuda)
  add_test(NAME test_document_mask_${mode}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_document_mask.sh $<TARGET_FILE:sluice>
                   ${CMAKE_CURRENT_BINARY_DIR}/document_mask_${mode} ${mode})
  set_tests_properties(test_document_mask_${mode} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=2")
endforeach()
set_tests_properties(test_document_mask_cpu PROPERTIES LABELS "model;cli")
set_tests_properties(test_document_mask_cuda PROPERTIES LABELS "cuda")
# sl_model_set_documents at the model level: a packed document's losses equal the document's
# alone (mask and restarted positions), starts at token 0 only are bitwise plain causal.
sluice_test(test_model_docs SOURCES test_model_docs.c LABELS model)
