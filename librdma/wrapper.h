/* The rdma-core headers whose types the libraries implement (Debian's libibverbs-dev and
 * librdmacm-dev). Only declarations are taken; nothing of rdma-core is linked. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
