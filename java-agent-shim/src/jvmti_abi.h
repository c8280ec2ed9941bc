/* The part of the JNI and JVMTI interfaces shim.c uses, declared here so that building jvmperf needs no
 * JDK (`cargo install` on a machine without one). Written from the specifications, which fix the binary
 * interface: types, constants, and each function's position in its table.
 *   JNI:   https://docs.oracle.com/en/java/javase/21/docs/specs/jni/types.html (types),
 *          .../jni/functions.html ("Index in the JNIEnv interface function table"),
 *          .../jni/invocation.html (the JavaVM table, JavaVMAttachArgs).
 *   JVMTI: https://docs.oracle.com/en/java/javase/21/docs/specs/jvmti.html ("Function #" of each
 *          function, "Event #" of each event, the error codes, the capabilities in order,
 *          jvmtiEventCallbacks).
 * Functions and events the shim does not use are unnamed slots; the offsets are checked below, and the
 * whole layout against a JDK's own headers by tests/jvmti_abi.rs. Only x86-64 and AArch64 Linux (LP64). */
#ifndef JVMPERF_JVMTI_ABI_H
#define JVMPERF_JVMTI_ABI_H

#include <stddef.h>

#define JNIEXPORT __attribute__((visibility("default")))
#define JNICALL

/* ---- JNI types and constants ---- */

typedef int jint;
typedef long jlong;
typedef unsigned char jboolean;

typedef struct jvmperf_jobject *jobject;
typedef jobject jclass;
typedef jobject jstring;
typedef jobject jthread;
typedef jobject jthreadGroup;
typedef struct jvmperf_jmethodID *jmethodID;

#define JNI_FALSE 0
#define JNI_OK 0
#define JNI_ERR (-1)
#define JNI_VERSION_1_6 0x00010006

struct JNINativeInterface_;
struct JNIInvokeInterface_;
typedef const struct JNINativeInterface_ *JNIEnv;
typedef const struct JNIInvokeInterface_ *JavaVM;

/* The JNIEnv function table; the comment after each function is its index. */
struct JNINativeInterface_ {
    void *unused_0[6];
    jclass(JNICALL *FindClass)(JNIEnv *env, const char *name); /* 6 */
    void *unused_7[10];
    void(JNICALL *ExceptionClear)(JNIEnv *env); /* 17 */
    void *unused_18[1];
    jint(JNICALL *PushLocalFrame)(JNIEnv *env, jint capacity);     /* 19 */
    jobject(JNICALL *PopLocalFrame)(JNIEnv *env, jobject result); /* 20 */
    void *unused_21[2];
    void(JNICALL *DeleteLocalRef)(JNIEnv *env, jobject ref);                  /* 23 */
    jboolean(JNICALL *IsSameObject)(JNIEnv *env, jobject ref1, jobject ref2); /* 24 */
    void *unused_25[88];
    jmethodID(JNICALL *GetStaticMethodID)(JNIEnv *env, jclass clazz, const char *name, const char *sig); /* 113 */
    jobject(JNICALL *CallStaticObjectMethod)(JNIEnv *env, jclass clazz, jmethodID method, ...);         /* 114 */
    void *unused_115[52];
    jstring(JNICALL *NewStringUTF)(JNIEnv *env, const char *bytes); /* 167 */
    void *unused_168[1];
    const char *(JNICALL *GetStringUTFChars)(JNIEnv *env, jstring string, jboolean *is_copy); /* 169 */
    void(JNICALL *ReleaseStringUTFChars)(JNIEnv *env, jstring string, const char *utf);       /* 170 */
    void *unused_171[57];
    jboolean(JNICALL *ExceptionCheck)(JNIEnv *env); /* 228 */
};

/* The JavaVM function table (invocation API). */
struct JNIInvokeInterface_ {
    void *unused_0[5];
    jint(JNICALL *DetachCurrentThread)(JavaVM *vm);                                /* 5 */
    jint(JNICALL *GetEnv)(JavaVM *vm, void **env, jint version);                   /* 6 */
    jint(JNICALL *AttachCurrentThreadAsDaemon)(JavaVM *vm, void **env, void *args); /* 7 */
};

typedef struct {
    jint version;
    char *name;
    jobject group;
} JavaVMAttachArgs;

/* ---- JVMTI types and constants ---- */

#define JVMTI_VERSION_1_2 0x30010200

typedef jlong jlocation;

typedef enum {
    JVMTI_ERROR_NONE = 0,
    JVMTI_ERROR_ILLEGAL_ARGUMENT = 103,
    JVMTI_ERROR_OUT_OF_MEMORY = 110,
    JVMTI_ERROR_WRONG_PHASE = 112,
} jvmtiError;

typedef enum {
    JVMTI_DISABLE = 0,
    JVMTI_ENABLE = 1,
} jvmtiEventMode;

typedef enum {
    JVMTI_EVENT_VM_INIT = 50,
    JVMTI_EVENT_VM_DEATH = 51,
    JVMTI_EVENT_THREAD_START = 52,
    JVMTI_EVENT_THREAD_END = 53,
    JVMTI_EVENT_COMPILED_METHOD_LOAD = 68,
    JVMTI_EVENT_COMPILED_METHOD_UNLOAD = 69,
    JVMTI_EVENT_DYNAMIC_CODE_GENERATED = 70,
} jvmtiEvent;

typedef struct {
    char *name;
    jint priority;
    jboolean is_daemon;
    jthreadGroup thread_group;
    jobject context_class_loader;
} jvmtiThreadInfo;

typedef struct {
    jlocation start_location;
    jint line_number;
} jvmtiLineNumberEntry;

typedef struct {
    const void *start_address;
    jlocation location;
} jvmtiAddrLocationMap;

/* 128 bits, one per capability in the specification's order (numbered from 1 in the comments). */
typedef struct {
    unsigned int : 11;
    unsigned int can_get_source_file_name : 1; /* 12 */
    unsigned int can_get_line_numbers : 1;     /* 13 */
    unsigned int : 14;
    unsigned int can_generate_compiled_method_load_events : 1; /* 28 */
    unsigned int : 4;
    unsigned int : 5;
    unsigned int can_retransform_classes : 1; /* 38 */
    unsigned int : 26;
    unsigned int : 32;
    unsigned int : 32;
} jvmtiCapabilities;

struct jvmtiInterface_1_;
typedef const struct jvmtiInterface_1_ *jvmtiEnv;

/* The event callbacks, one slot per event from VMInit (50) on; the shim passes this size to
 * SetEventCallbacks, and the JVM leaves the events after DynamicCodeGenerated without a callback. */
typedef struct {
    void(JNICALL *VMInit)(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread);      /* 50 */
    void(JNICALL *VMDeath)(jvmtiEnv *jvmti, JNIEnv *jni);                     /* 51 */
    void(JNICALL *ThreadStart)(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread); /* 52 */
    void(JNICALL *ThreadEnd)(jvmtiEnv *jvmti, JNIEnv *jni, jthread thread);   /* 53 */
    void *unused_54[14];
    void(JNICALL *CompiledMethodLoad)(jvmtiEnv *jvmti, jmethodID method, jint code_size, const void *code_addr,
                                      jint map_length, const jvmtiAddrLocationMap *map,
                                      const void *compile_info);                                   /* 68 */
    void(JNICALL *CompiledMethodUnload)(jvmtiEnv *jvmti, jmethodID method, const void *code_addr); /* 69 */
    void(JNICALL *DynamicCodeGenerated)(jvmtiEnv *jvmti, const char *name, const void *address,
                                        jint length); /* 70 */
} jvmtiEventCallbacks;

/* The JVMTI function table; the comment after each function is its function number (slot 1 is
 * reserved, so the number is the position counted from 1). */
struct jvmtiInterface_1_ {
    void *unused_1[1];
    jvmtiError(JNICALL *SetEventNotificationMode)(jvmtiEnv *env, jvmtiEventMode mode, jvmtiEvent event_type,
                                                  jthread event_thread, ...); /* 2 */
    void *unused_3[6];
    jvmtiError(JNICALL *GetThreadInfo)(jvmtiEnv *env, jthread thread, jvmtiThreadInfo *info_ptr); /* 9 */
    void *unused_10[35];
    jvmtiError(JNICALL *IsModifiableClass)(jvmtiEnv *env, jclass klass, jboolean *is_modifiable); /* 45 */
    void *unused_46[1];
    jvmtiError(JNICALL *Deallocate)(jvmtiEnv *env, unsigned char *mem); /* 47 */
    jvmtiError(JNICALL *GetClassSignature)(jvmtiEnv *env, jclass klass, char **signature_ptr,
                                           char **generic_ptr); /* 48 */
    void *unused_49[1];
    jvmtiError(JNICALL *GetSourceFileName)(jvmtiEnv *env, jclass klass, char **source_name_ptr); /* 50 */
    void *unused_51[7];
    jvmtiError(JNICALL *GetObjectHashCode)(jvmtiEnv *env, jobject object, jint *hash_code_ptr); /* 58 */
    void *unused_59[5];
    jvmtiError(JNICALL *GetMethodName)(jvmtiEnv *env, jmethodID method, char **name_ptr, char **signature_ptr,
                                       char **generic_ptr);                                              /* 64 */
    jvmtiError(JNICALL *GetMethodDeclaringClass)(jvmtiEnv *env, jmethodID method, jclass *declaring_class_ptr); /* 65 */
    jvmtiError(JNICALL *GetMethodModifiers)(jvmtiEnv *env, jmethodID method, jint *modifiers_ptr);            /* 66 */
    void *unused_67[3];
    jvmtiError(JNICALL *GetLineNumberTable)(jvmtiEnv *env, jmethodID method, jint *entry_count_ptr,
                                            jvmtiLineNumberEntry **table_ptr); /* 70 */
    jvmtiError(JNICALL *GetMethodLocation)(jvmtiEnv *env, jmethodID method, jlocation *start_location_ptr,
                                           jlocation *end_location_ptr); /* 71 */
    void *unused_72[17];
    jvmtiError(JNICALL *GetCapabilities)(jvmtiEnv *env, jvmtiCapabilities *capabilities_ptr); /* 89 */
    void *unused_90[32];
    jvmtiError(JNICALL *SetEventCallbacks)(jvmtiEnv *env, const jvmtiEventCallbacks *callbacks,
                                           jint size_of_callbacks);              /* 122 */
    jvmtiError(JNICALL *GenerateEvents)(jvmtiEnv *env, jvmtiEvent event_type); /* 123 */
    void *unused_124[3];
    jvmtiError(JNICALL *DisposeEnvironment)(jvmtiEnv *env); /* 127 */
    void *unused_128[3];
    jvmtiError(JNICALL *GetSystemProperty)(jvmtiEnv *env, const char *property, char **value_ptr); /* 131 */
    void *unused_132[10];
    jvmtiError(JNICALL *AddCapabilities)(jvmtiEnv *env, const jvmtiCapabilities *capabilities_ptr);        /* 142 */
    jvmtiError(JNICALL *RelinquishCapabilities)(jvmtiEnv *env, const jvmtiCapabilities *capabilities_ptr); /* 143 */
    void *unused_144[8];
    jvmtiError(JNICALL *RetransformClasses)(jvmtiEnv *env, jint class_count, const jclass *classes); /* 152 */
};

/* ---- CompiledMethodLoad's compile_info ----
 * A list of records; HotSpot sends one of kind JVMTI_CMLR_INLINE_INFO: per PC, the inlined methods and
 * bytecode indices, innermost first. The JVMTI specification leaves the format to the JDK, which documents
 * it in its include/jvmticmlr.h. */
typedef enum {
    JVMTI_CMLR_DUMMY = 1,
    JVMTI_CMLR_INLINE_INFO = 2,
} jvmtiCMLRKind;

typedef struct jvmtiCompiledMethodLoadRecordHeader {
    jvmtiCMLRKind kind;
    jint majorinfoversion;
    jint minorinfoversion;
    struct jvmtiCompiledMethodLoadRecordHeader *next;
} jvmtiCompiledMethodLoadRecordHeader;

typedef struct {
    void *pc;
    jint numstackframes;
    jmethodID *methods;
    jint *bcis;
} PCStackInfo;

typedef struct {
    jvmtiCompiledMethodLoadRecordHeader header;
    jint numpcs;
    PCStackInfo *pcinfo;
} jvmtiCompiledMethodLoadInlineRecord;

/* The indices above, as the specifications number them. */
#define JVMPERF_SLOT(type, field, index) _Static_assert(offsetof(type, field) == (index) * sizeof(void *), #field)
JVMPERF_SLOT(struct JNINativeInterface_, FindClass, 6);
JVMPERF_SLOT(struct JNINativeInterface_, ExceptionClear, 17);
JVMPERF_SLOT(struct JNINativeInterface_, PushLocalFrame, 19);
JVMPERF_SLOT(struct JNINativeInterface_, DeleteLocalRef, 23);
JVMPERF_SLOT(struct JNINativeInterface_, GetStaticMethodID, 113);
JVMPERF_SLOT(struct JNINativeInterface_, NewStringUTF, 167);
JVMPERF_SLOT(struct JNINativeInterface_, GetStringUTFChars, 169);
JVMPERF_SLOT(struct JNINativeInterface_, ExceptionCheck, 228);
JVMPERF_SLOT(struct JNIInvokeInterface_, DetachCurrentThread, 5);
JVMPERF_SLOT(jvmtiEventCallbacks, VMInit, 50 - 50);
JVMPERF_SLOT(jvmtiEventCallbacks, CompiledMethodLoad, 68 - 50);
JVMPERF_SLOT(jvmtiEventCallbacks, DynamicCodeGenerated, 70 - 50);
JVMPERF_SLOT(struct jvmtiInterface_1_, SetEventNotificationMode, 2 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, GetThreadInfo, 9 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, IsModifiableClass, 45 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, GetSourceFileName, 50 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, GetObjectHashCode, 58 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, GetMethodName, 64 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, GetLineNumberTable, 70 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, GetCapabilities, 89 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, SetEventCallbacks, 122 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, DisposeEnvironment, 127 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, GetSystemProperty, 131 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, AddCapabilities, 142 - 1);
JVMPERF_SLOT(struct jvmtiInterface_1_, RetransformClasses, 152 - 1);
_Static_assert(sizeof(jvmtiCapabilities) == 16, "jvmtiCapabilities is 128 bits");
#undef JVMPERF_SLOT

#endif
