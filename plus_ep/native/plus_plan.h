/* Everything of the launch plan in one include: the plan and its expressions (plan.h), binding a
 * run (bind.h) and image packs (pack.h). Kept for code that includes the former single header. */
#ifndef PLUS_PLAN_H
#define PLUS_PLAN_H

#include "plan.h"
#include "bind.h"
#include "pack.h"

#endif
