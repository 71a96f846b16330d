/* Headers bindgen reads for `dpdk-sys`. rte_config.h must come first: the other DPDK
 * headers depend on its build-time settings (cache line size, max lcores, ...). */
#include <rte_config.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_memory.h>
#include <rte_memzone.h>
#include <rte_malloc.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ether.h>
#include <rte_ethdev.h>
#include <rte_bus_vdev.h>
#include <rte_version.h>
#include <rte_alarm.h>
#include <rte_interrupts.h>
#include <rte_telemetry.h>

#include "shim.h"
