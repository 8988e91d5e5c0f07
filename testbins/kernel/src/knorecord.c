/* knorecord.c - the plain build records nothing. */
#include "kern.h"

void record_dump(void) {}
