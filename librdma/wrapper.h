/* The rdma-core headers whose types the libraries implement (Debian's libibverbs-dev and
 * librdmacm-dev). Only declarations are taken; nothing of rdma-core is linked. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
/* The kernel ABI structs of libibverbs' marshalling helpers (ibv_copy_*_kern) and of the
 * private ioctl command buffer (__ioctl_final_num_attrs). */
#include <rdma/ib_user_sa.h>
#include <rdma/rdma_user_ioctl_cmds.h>
