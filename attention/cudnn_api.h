/*
 * attention/cudnn_api.h - the part of cuDNN 9's C API that attention/cudnn_sdpa.c uses, declared
 * here so that sluice builds without cuDNN's headers and runs without its library: libcudnn.so.9
 * is opened with dlopen at run time, and its functions are called through the pointers below.
 *
 * The values are cuDNN's, copied from cudnn_graph.h of cuDNN 9.19.0 (the toolkit's include
 * directory on the development machine, 2026-11-26); they are part of cuDNN's ABI, which the 9.x
 * series keeps stable. Every name is cuDNN's own with the prefix SL_ (SL_CUDNN_ATTR_... for
 * CUDNN_ATTR_...), so that the real header can be included beside this one: where it exists,
 * cudnn_sdpa.c compiles a static assertion per value against it.
 */
#ifndef SL_ATTENTION_CUDNN_API_H
#define SL_ATTENTION_CUDNN_API_H

#include <stddef.h>
#include <stdint.h>

/* cudnnStatus_t */
#define SL_CUDNN_STATUS_SUCCESS 0

/* cudnnDataType_t */
enum {
    SL_CUDNN_DATA_FLOAT = 0,
    SL_CUDNN_DATA_INT32 = 4,
    SL_CUDNN_DATA_BFLOAT16 = 9,
    SL_CUDNN_DATA_BOOLEAN = 11,
};

/* cudnnPointwiseMode_t */
enum {
    SL_CUDNN_POINTWISE_ADD = 0,
    SL_CUDNN_POINTWISE_MUL = 1,
    SL_CUDNN_POINTWISE_DIV = 6,
    SL_CUDNN_POINTWISE_SUB = 9,
    SL_CUDNN_POINTWISE_EXP = 13,
    SL_CUDNN_POINTWISE_LOG = 15,
    SL_CUDNN_POINTWISE_IDENTITY = 21,
    SL_CUDNN_POINTWISE_CMP_GE = 303,
    SL_CUDNN_POINTWISE_GEN_INDEX = 501,
    SL_CUDNN_POINTWISE_BINARY_SELECT = 601,
};

/* cudnnReduceTensorOp_t */
enum {
    SL_CUDNN_REDUCE_TENSOR_ADD = 0,
    SL_CUDNN_REDUCE_TENSOR_MAX = 3,
};

/* cudnnBackendHeurMode_t */
enum {
    SL_CUDNN_HEUR_MODE_INSTANT = 0,
    SL_CUDNN_HEUR_MODE_FALLBACK = 2,
    SL_CUDNN_HEUR_MODE_A = 3,
};

/* cudnnBackendAttributeType_t */
enum {
    SL_CUDNN_TYPE_HANDLE = 0,
    SL_CUDNN_TYPE_DATA_TYPE = 1,
    SL_CUDNN_TYPE_BOOLEAN = 2,
    SL_CUDNN_TYPE_INT64 = 3,
    SL_CUDNN_TYPE_FLOAT = 4,
    SL_CUDNN_TYPE_VOID_PTR = 6,
    SL_CUDNN_TYPE_HEUR_MODE = 8,
    SL_CUDNN_TYPE_POINTWISE_MODE = 14,
    SL_CUDNN_TYPE_BACKEND_DESCRIPTOR = 15,
    SL_CUDNN_TYPE_REDUCTION_OPERATOR_TYPE = 18,
};

/* cudnnBackendDescriptorType_t */
enum {
    SL_CUDNN_BACKEND_POINTWISE_DESCRIPTOR = 0,
    SL_CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3,
    SL_CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4,
    SL_CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5,
    SL_CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13,
    SL_CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15,
    SL_CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16,
    SL_CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17,
    SL_CUDNN_BACKEND_MATMUL_DESCRIPTOR = 18,
    SL_CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR = 19,
    SL_CUDNN_BACKEND_REDUCTION_DESCRIPTOR = 21,
    SL_CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR = 22,
    SL_CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR = 31,
};

/* cudnnBackendAttributeName_t */
enum {
    SL_CUDNN_ATTR_POINTWISE_MODE = 0,
    SL_CUDNN_ATTR_POINTWISE_MATH_PREC = 1,
    SL_CUDNN_ATTR_POINTWISE_AXIS = 9,

    SL_CUDNN_ATTR_ENGINEHEUR_MODE = 200,
    SL_CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
    SL_CUDNN_ATTR_ENGINEHEUR_RESULTS = 202,

    /* deprecated in 9.19 (the handle became optional in 9.8) but still accepted, and required
     * by the 9.x releases before 9.8 */
    SL_CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400,
    SL_CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
    SL_CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,

    SL_CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750,
    SL_CUDNN_ATTR_OPERATION_POINTWISE_XDESC = 751,
    SL_CUDNN_ATTR_OPERATION_POINTWISE_BDESC = 752,
    SL_CUDNN_ATTR_OPERATION_POINTWISE_YDESC = 753,
    SL_CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1 = 754,
    SL_CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2 = 755,
    SL_CUDNN_ATTR_OPERATION_POINTWISE_TDESC = 758,

    SL_CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800, /* deprecated like the plan's handle */
    SL_CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,

    SL_CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900,
    SL_CUDNN_ATTR_TENSOR_DATA_TYPE = 901,
    SL_CUDNN_ATTR_TENSOR_DIMENSIONS = 902,
    SL_CUDNN_ATTR_TENSOR_STRIDES = 903,
    SL_CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
    SL_CUDNN_ATTR_TENSOR_IS_VIRTUAL = 907,
    SL_CUDNN_ATTR_TENSOR_IS_BY_VALUE = 908,

    SL_CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
    SL_CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
    SL_CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,

    SL_CUDNN_ATTR_MATMUL_COMP_TYPE = 1500,
    SL_CUDNN_ATTR_OPERATION_MATMUL_ADESC = 1520,
    SL_CUDNN_ATTR_OPERATION_MATMUL_BDESC = 1521,
    SL_CUDNN_ATTR_OPERATION_MATMUL_CDESC = 1522,
    SL_CUDNN_ATTR_OPERATION_MATMUL_DESC = 1523,

    SL_CUDNN_ATTR_REDUCTION_OPERATOR = 1600,
    SL_CUDNN_ATTR_REDUCTION_COMP_TYPE = 1601,
    SL_CUDNN_ATTR_OPERATION_REDUCTION_XDESC = 1610,
    SL_CUDNN_ATTR_OPERATION_REDUCTION_YDESC = 1611,
    SL_CUDNN_ATTR_OPERATION_REDUCTION_DESC = 1612,

    SL_CUDNN_ATTR_OPERATION_RESHAPE_XDESC = 2200,
    SL_CUDNN_ATTR_OPERATION_RESHAPE_YDESC = 2201,
};

/* The entry points, as cudnn_graph.h declares them (cudnnHandle_t, cudnnBackendDescriptor_t and
 * cudaStream_t are pointers; every enum parameter is an int). */
typedef struct {
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(int status);
    void (*GetLastErrorString)(char *message, size_t max_size); /* NULL if absent */
    int (*Create)(void **handle);
    int (*Destroy)(void *handle);
    int (*SetStream)(void *handle, void *stream);
    int (*BackendCreateDescriptor)(int type, void **desc);
    int (*BackendDestroyDescriptor)(void *desc);
    int (*BackendFinalize)(void *desc);
    int (*BackendSetAttribute)(void *desc, int name, int type, int64_t count, const void *values);
    int (*BackendGetAttribute)(void *desc, int name, int type, int64_t requested, int64_t *count,
                               void *values);
    int (*BackendExecute)(void *handle, void *plan, void *variant_pack);
} sl_cudnn_api;

#endif
