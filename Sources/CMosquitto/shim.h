#pragma once
// libmosquitto: the MQTT client the fleet bridge (FieldHALMQTT) speaks to a broker through.
#include <mosquitto.h>
