/* log.h - leveled messages to stderr (DILATTN_LOG_LEVEL). */
#ifndef DA_LOG_H
#define DA_LOG_H

#include "runtime/internal.h"

enum { DA_LOG_ERROR = 0, DA_LOG_WARN = 1, DA_LOG_INFO = 2, DA_LOG_DEBUG = 3 };

DA_HIDDEN void da__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* da__log, said only the first time in this process that key is (NULL: the line's own text;
 * a key where the text varies, a temp file's name in it): a refusal met by every plan of a
 * model's layers is one line, not one a layer */
DA_HIDDEN void da__log_once(const char *key, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
